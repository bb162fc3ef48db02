/* node_local.c -- the Unix socket a dedicated node hands its segment out on.
 *
 * One thread polls the listening socket and a stop pipe. Each accepted
 * connection is answered at once and closed: SO_PEERCRED gives the peer's
 * uid and gid, SO_PEERGROUPS its supplementary groups, node_local_peer_allowed decides, and the answer is one
 * sendmsg -- the status byte and a text, with a fresh descriptor of the
 * segment file attached when granted (seg_share_fd: not the node's own
 * descriptor, whose open file description carries the node's flock and
 * must never outlive the node in a client). The answer fits in the socket
 * buffer of a new connection, and a send timeout bounds a peer that does
 * not read; a failed answer only costs that peer its mapping. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "node_local.h"
#include "rpc_auth.h"
#include "wm_errbuf.h"

struct node_local {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char node_id[SEG_ID_MAX + 1];
    char tenant[RPC_AUTH_TENANT_MAX + 1];
    node_local_peers peers;
    seg_segment *seg;
    int listen_fd;
    int stop_pipe[2];
    pthread_t thread;
};

int node_local_add_peer(node_local_peers *p, const char *spec, char *err, size_t errlen)
{
    int is_uid = strncmp(spec, "uid:", 4) == 0;
    char *end = NULL;
    if (!is_uid && strncmp(spec, "gid:", 4) != 0) goto bad;
    const char *num = spec + 4;
    if (*num < '0' || *num > '9') goto bad;
    errno = 0;
    unsigned long long v = strtoull(num, &end, 10);
    if (errno != 0 || *end != '\0' || v >= 0xffffffffull) goto bad;
    size_t *n = is_uid ? &p->n_uids : &p->n_gids;
    if (*n >= NODE_LOCAL_PEERS_MAX) {
        wm_errbuf(err, errlen, "--local-peer %s: more than %d %s", spec, NODE_LOCAL_PEERS_MAX,
                  is_uid ? "uids" : "gids");
        return SMP_ERANGE;
    }
    if (is_uid) p->uids[(*n)++] = (uid_t)v;
    else p->gids[(*n)++] = (gid_t)v;
    return SMP_OK;
bad:
    wm_errbuf(err, errlen, "--local-peer %s: expected uid:N or gid:N (N a decimal user or group "
              "id)", spec);
    return SMP_EINVAL;
}

int node_local_peer_allowed(const node_local_peers *p, uid_t uid, gid_t gid, const gid_t *groups,
                            size_t n_groups)
{
    for (size_t i = 0; i < p->n_uids; i++)
        if (p->uids[i] == uid) return 1;
    for (size_t i = 0; i < p->n_gids; i++) {
        if (p->gids[i] == gid) return 1;
        for (size_t g = 0; g < n_groups; g++)
            if (p->gids[i] == groups[g]) return 1;
    }
    return 0;
}

/* The supplementary groups of c's peer as they were when it connected
 * (SO_PEERGROUPS), in *out (malloc'ed; free it) and *n. A kernel without
 * SO_PEERGROUPS, or a failure, gives none: the peer is then judged by its
 * uid and primary gid alone, which can only refuse more. */
static void peer_groups(int c, gid_t **out, size_t *n)
{
    socklen_t len = 64 * sizeof(gid_t);
    *out = NULL;
    *n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        gid_t *g = malloc(len ? len : sizeof(gid_t));
        if (g == NULL) return;
        socklen_t got = len;
        if (getsockopt(c, SOL_SOCKET, SO_PEERGROUPS, g, &got) == 0) {
            *out = g;
            *n = got / sizeof(gid_t);
            return;
        }
        free(g);
        if (errno != ERANGE || got <= len) return;
        len = got; /* the kernel said how much it needs */
    }
}

/* Send the status byte and text on c, with fd attached when fd >= 0.
 * 0, or -errno when the send failed (the peer gets nothing). */
static int answer(int c, char status, const char *text, int fd)
{
    char buf[700];
    int len = snprintf(buf, sizeof(buf), "%c%s", status, text);
    if (len < 0) return -EINVAL;
    if ((size_t)len >= sizeof(buf)) len = (int)sizeof(buf) - 1;
    struct iovec iov = {.iov_base = buf, .iov_len = (size_t)len};
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&ctl, 0, sizeof(ctl));
        msg.msg_control = ctl.space;
        msg.msg_controllen = sizeof(ctl.space);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    return sendmsg(c, &msg, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* Answer one accepted connection c (closed by the caller). */
static void serve_peer(node_local *l, int c)
{
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    char text[640];
    struct timeval tv = {.tv_sec = 1};
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 || clen != sizeof(cred)) {
        answer(c, NODE_LOCAL_REFUSED, "the peer's credentials could not be read", -1);
        return;
    }
    gid_t *groups = NULL;
    size_t n_groups = 0;
    peer_groups(c, &groups, &n_groups);
    int allowed = node_local_peer_allowed(&l->peers, cred.uid, cred.gid, groups, n_groups);
    free(groups);
    if (!allowed) {
        snprintf(text, sizeof(text), "uid %u gid %u is not a local peer of tenant %s on node %s",
                 (unsigned)cred.uid, (unsigned)cred.gid, l->tenant, l->node_id);
        fprintf(stderr, "store_node %s: local socket: pid %d refused: %s\n", l->node_id,
                (int)cred.pid, text);
        answer(c, NODE_LOCAL_REFUSED, text, -1);
        return;
    }
    int fd = seg_share_fd(l->seg);
    if (fd < 0) {
        snprintf(text, sizeof(text), "node %s cannot open its segment again: %s", l->node_id,
                 smp_strerror(fd));
        answer(c, NODE_LOCAL_REFUSED, text, -1);
        return;
    }
    int e = answer(c, NODE_LOCAL_GRANTED, l->node_id, fd);
    if (e < 0)
        fprintf(stderr, "store_node %s: local socket: pid %d: segment not sent: %s\n", l->node_id,
                (int)cred.pid, strerror(-e));
    close(fd);
}

static void *serve_main(void *arg)
{
    node_local *l = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = l->listen_fd, .events = POLLIN},
                              {.fd = l->stop_pipe[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents != 0) break;
        int c = accept4(l->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) continue; /* the peer went away, or out of descriptors: next one */
        serve_peer(l, c);
        close(c);
    }
    return NULL;
}

/* Make sure nothing listens at path any more: SMP_OK (absent, or a stale
 * socket removed), SMP_EBUSY, SMP_EEXIST. */
static int clear_stale(const struct sockaddr_un *addr, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(addr->sun_path, &st) != 0) return SMP_OK;
    if (!S_ISSOCK(st.st_mode)) {
        wm_errbuf(err, errlen, "local socket %s: exists and is not a socket", addr->sun_path);
        return SMP_EEXIST;
    }
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (const struct sockaddr *)addr, sizeof(*addr)) == 0) {
        close(probe);
        wm_errbuf(err, errlen, "local socket %s: another process listens there", addr->sun_path);
        return SMP_EBUSY;
    }
    if (probe >= 0) close(probe);
    unlink(addr->sun_path); /* a node that was killed left it */
    return SMP_OK;
}

int node_local_start(const char *socket_path,
                     const char *node_id,
                     const char *tenant,
                     const node_local_peers *peers,
                     seg_segment *seg,
                     node_local **out,
                     char *err,
                     size_t errlen)
{
    int rc;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (socket_path == NULL || socket_path[0] == '\0' ||
        strlen(socket_path) >= sizeof(addr.sun_path) || rpc_auth_tenant_check(tenant, NULL, 0) < 0) {
        wm_errbuf(err, errlen, "local socket %s: empty, or longer than %zu bytes", socket_path,
                  sizeof(addr.sun_path) - 1);
        return SMP_EINVAL;
    }
    node_local *l = calloc(1, sizeof(*l));
    if (l == NULL) return SMP_ENOMEM;
    snprintf(l->path, sizeof(l->path), "%s", socket_path);
    snprintf(l->node_id, sizeof(l->node_id), "%s", node_id);
    snprintf(l->tenant, sizeof(l->tenant), "%s", tenant);
    l->peers = *peers;
    l->seg = seg;
    l->stop_pipe[0] = l->stop_pipe[1] = -1;
    memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);
    if ((rc = clear_stale(&addr, err, errlen)) < 0) goto free_l;
    l->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l->listen_fd < 0 || bind(l->listen_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        wm_errbuf(err, errlen, "local socket %s: %s", socket_path, strerror(errno));
        rc = SMP_EIO;
        goto close_listen;
    }
    /* anyone may ask; SO_PEERCRED decides who is answered with the segment */
    if (chmod(socket_path, 0666) < 0 || listen(l->listen_fd, 64) < 0 ||
        pipe2(l->stop_pipe, O_CLOEXEC) < 0) {
        wm_errbuf(err, errlen, "local socket %s: %s", socket_path, strerror(errno));
        rc = SMP_EIO;
        goto unlink_path;
    }
    if (pthread_create(&l->thread, NULL, serve_main, l) != 0) {
        wm_errbuf(err, errlen, "local socket %s: no thread", socket_path);
        rc = SMP_EIO;
        goto unlink_path;
    }
    *out = l;
    return SMP_OK;
unlink_path:
    unlink(socket_path);
close_listen:
    if (l->listen_fd >= 0) close(l->listen_fd);
    if (l->stop_pipe[0] >= 0) close(l->stop_pipe[0]);
    if (l->stop_pipe[1] >= 0) close(l->stop_pipe[1]);
free_l:
    free(l);
    return rc;
}

void node_local_stop(node_local *l)
{
    if (l == NULL) return;
    char one = 1;
    if (write(l->stop_pipe[1], &one, 1) != 1) { /* the thread then blocks in poll: cannot be */ }
    pthread_join(l->thread, NULL);
    close(l->listen_fd);
    close(l->stop_pipe[0]);
    close(l->stop_pipe[1]);
    unlink(l->path);
    free(l);
}
