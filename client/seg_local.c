/* seg_local.c -- receive a dedicated node's segment descriptor over its
 * local socket (seg_local.h).
 *
 * One connection per request: connect, one recvmsg of the node's answer
 * (a status byte, a text, and for a grant one SCM_RIGHTS descriptor), close;
 * the connect and the answer each wait at most SEG_LOCAL_TIMEOUT_S.
 * Refusals are kept in a small process-wide table keyed by the socket
 * file's device and inode and the credentials refused, so a refused
 * process neither asks again nor logs again until that node restarts (or
 * the process runs as another user). A node that let a connect or an
 * answer time out is kept in a second one for SEG_LOCAL_QUIET_S: every
 * mapping a get or put tries would otherwise wait out the timeout again,
 * where the data port answers at once. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "seg_local.h"
#include "wm_errbuf.h"

#define REFUSALS_MAX 16
#define SEG_LOCAL_TIMEOUT_S 5 /* the connect, then the answer */
#define SILENT_MAX 16
#define SEG_LOCAL_QUIET_S 30  /* a silent node is not asked again this long */

typedef struct refusal {
    dev_t dev;
    ino_t ino;
    struct timespec ctime; /* an inode number reused by a new socket differs here */
    uid_t uid;          /* the credentials refused (a process that changed */
    gid_t gid;          /* them since, e.g. a forked child, asks again) */
    char cause[704];
} refusal;

/* A socket file whose node let a connect or an answer time out. */
typedef struct silence {
    dev_t dev;
    ino_t ino;
    struct timespec ctime;
    time_t since;       /* CLOCK_MONOTONIC seconds of the time-out */
    char cause[704];
} silence;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static refusal g_refused[REFUSALS_MAX];
static size_t g_n_refused;
static silence g_silent[SILENT_MAX];
static size_t g_n_silent;

static time_t mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec;
}

static int same_file(dev_t dev, ino_t ino, const struct timespec *ctime, const struct stat *st)
{
    return dev == st->st_dev && ino == st->st_ino && ctime->tv_sec == st->st_ctim.tv_sec &&
           ctime->tv_nsec == st->st_ctim.tv_nsec;
}

/* The index of socket file st's time-out, or -1 (under g_lock). A time-out
 * older than SEG_LOCAL_QUIET_S is forgotten here. */
static int find_silence(const struct stat *st)
{
    for (size_t i = 0; i < g_n_silent; i++) {
        if (!same_file(g_silent[i].dev, g_silent[i].ino, &g_silent[i].ctime, st)) continue;
        if (mono_s() - g_silent[i].since < SEG_LOCAL_QUIET_S) return (int)i;
        g_silent[i] = g_silent[--g_n_silent];
        return -1;
    }
    return -1;
}

/* Remember that the node on socket file st timed out (cause), replacing an
 * older time-out of it (the oldest entry gives way when the table is
 * full). */
static void note_silence(const struct stat *st, const char *cause)
{
    pthread_mutex_lock(&g_lock);
    int i = find_silence(st);
    if (i < 0) {
        if (g_n_silent == SILENT_MAX) {
            memmove(&g_silent[0], &g_silent[1], (SILENT_MAX - 1) * sizeof(silence));
            g_n_silent--;
        }
        i = (int)g_n_silent++;
    }
    silence *s = &g_silent[i];
    s->dev = st->st_dev;
    s->ino = st->st_ino;
    s->ctime = st->st_ctim;
    s->since = mono_s();
    snprintf(s->cause, sizeof(s->cause), "%s", cause != NULL ? cause : "timed out");
    pthread_mutex_unlock(&g_lock);
}

/* The remembered refusal of the socket file st to this process's current
 * credentials, or NULL (under g_lock). */
static const refusal *find_refusal(const struct stat *st)
{
    uid_t uid = geteuid();
    gid_t gid = getegid();
    for (size_t i = 0; i < g_n_refused; i++)
        if (same_file(g_refused[i].dev, g_refused[i].ino, &g_refused[i].ctime, st) &&
            g_refused[i].uid == uid && g_refused[i].gid == gid)
            return &g_refused[i];
    return NULL;
}

/* Remember that the socket file st refused this process, and log it the
 * first time (the oldest entry gives way when the table is full). */
static void note_refusal(const char *socket_path, const struct stat *st, const char *cause)
{
    pthread_mutex_lock(&g_lock);
    if (find_refusal(st) == NULL) {
        if (g_n_refused == REFUSALS_MAX) {
            memmove(&g_refused[0], &g_refused[1], (REFUSALS_MAX - 1) * sizeof(refusal));
            g_n_refused--;
        }
        refusal *r = &g_refused[g_n_refused++];
        r->dev = st->st_dev;
        r->ino = st->st_ino;
        r->ctime = st->st_ctim;
        r->uid = geteuid();
        r->gid = getegid();
        snprintf(r->cause, sizeof(r->cause), "%s", cause);
        fprintf(stderr, "libweightclient: the node on %s refused this process its segment (%s); "
                "reading and writing through its data port with tickets\n", socket_path, cause);
    }
    pthread_mutex_unlock(&g_lock);
}

int seg_local_fetch(const char *socket_path, int *fd, struct stat *sock, char *err, size_t errlen)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    char buf[701];
    int rc, got = -1;
    *fd = -1;
    if (strlen(socket_path) >= sizeof(addr.sun_path)) {
        wm_errbuf(err, errlen, "local socket %s: path too long", socket_path);
        return SMP_EINVAL;
    }
    if (stat(socket_path, sock) != 0) {
        wm_errbuf(err, errlen, "local socket %s: %s", socket_path, strerror(errno));
        return SMP_ENOTFOUND;
    }
    pthread_mutex_lock(&g_lock);
    const refusal *r = find_refusal(sock);
    int quiet = r == NULL ? find_silence(sock) : -1;
    if (r != NULL) wm_errbuf(err, errlen, "%s", r->cause);
    else if (quiet >= 0)
        wm_errbuf(err, errlen, "%s %lld s ago; not asked again for %d s after it",
                  g_silent[quiet].cause, (long long)(mono_s() - g_silent[quiet].since),
                  SEG_LOCAL_QUIET_S);
    pthread_mutex_unlock(&g_lock);
    if (r != NULL) return SMP_EFORBIDDEN;
    if (quiet >= 0) return SMP_EIO;

    memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0) {
        wm_errbuf(err, errlen, "local socket %s: %s", socket_path, strerror(errno));
        return SMP_EIO;
    }
    /* The connect is bounded as the answer is: a node whose backlog is full
     * (it accepts nothing) would keep a blocking connect waiting for ever;
     * with SO_SNDTIMEO it fails EAGAIN once the time is up. */
    struct timeval tv = {.tv_sec = SEG_LOCAL_TIMEOUT_S};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(c, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        rc = errno == ECONNREFUSED || errno == ENOENT ? SMP_ENOTFOUND : SMP_EIO;
        if (errno == EAGAIN || errno == EINTR) {
            wm_errbuf(err, errlen, "local socket %s: connect timed out after %d s (the node "
                      "accepts no connection)", socket_path, SEG_LOCAL_TIMEOUT_S);
            note_silence(sock, err);
        } else
            wm_errbuf(err, errlen, "local socket %s: %s", socket_path, strerror(errno));
        goto close_c;
    }
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf) - 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space,
                         .msg_controllen = sizeof(ctl.space)};
    ssize_t n = recvmsg(c, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
        int timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
        if (timed_out)
            wm_errbuf(err, errlen, "local socket %s: no answer within %d s", socket_path,
                      SEG_LOCAL_TIMEOUT_S);
        else
            wm_errbuf(err, errlen, "local socket %s: no answer: %s", socket_path, strerror(errno));
        if (timed_out) note_silence(sock, err);
        rc = SMP_EIO;
        goto close_c;
    }
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
            cm->cmsg_len == CMSG_LEN(sizeof(int)) && got < 0)
            memcpy(&got, CMSG_DATA(cm), sizeof(int));
    buf[n] = '\0';
    if (n >= 1 && buf[0] == NODE_LOCAL_GRANTED && got >= 0 && !(msg.msg_flags & MSG_CTRUNC)) {
        *fd = got;
        got = -1;
        rc = SMP_OK;
    } else if (n >= 1 && buf[0] == NODE_LOCAL_REFUSED && got < 0) {
        wm_errbuf(err, errlen, "%s", buf + 1);
        note_refusal(socket_path, sock, buf + 1);
        rc = SMP_EFORBIDDEN;
    } else {
        wm_errbuf(err, errlen, "local socket %s: the answer is not a node's", socket_path);
        rc = SMP_EPROTO;
    }
    if (got >= 0) close(got);
close_c:
    close(c);
    return rc;
}
