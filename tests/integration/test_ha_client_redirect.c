/* test_ha_client_redirect.c -- clients and nodes given a list of masters find
 * the leader and follow a standby's redirect (issue 15), without an HA
 * cluster.
 *
 * One real store_master (harness.c, embedded node) is "the leader". In front
 * of it, in this process, tiny fake masters on Unix sockets in the test's
 * directory inject what only an HA cluster would produce on demand:
 *   - "standby": answers every request but status with SMP_ENOTLEADER
 *     naming the real master's socket as the leader (a standby that knows
 *     the leader), and status with a cluster of three masters as it sees it;
 *   - "electing": answers every request with SMP_ENOTLEADER and no leader
 *     (a standby while no leader is known);
 *   - "dropper": reads one request and closes the connection without an
 *     answer (a leader that died after the request reached it);
 *   every one of these but "stalling" answers the question a client asks
 *   first on each socket of a list (auth.HELLO without a token), as any
 *   live master does, saying whether it leads (the standbys: no, naming
 *   their leader);
 *   - "proxy": passes every frame on to the real master and back, until the
 *     test deposes it: from then on it answers like "standby" (a leader
 *     that lost its lease while a node was attached to it); told to, it
 *     answers lookups SMP_EBUSY itself (a lookup met while a change that
 *     frees the object's bytes is being made durable, for a commit's
 *     milliseconds);
 *     Made silent, it reads every request and neither passes it on nor
 *     answers (a leader paused or hung, its connections kept);
 *   - "stalling": closes the connection of its first request, like
 *     "dropper", and reads every later request and answers none (a master
 *     whose loop stalls).
 * They are fakes only for the answers they inject; every call that succeeds
 * is served by the real master, which the tests check (the object is
 * there, the connection ended at the real socket, the fake saw the call).
 *
 * Pins: a kv call given "standby,real", just "standby" or "electing,real"
 * lands on the real master; weightctl and libweightclient do the same with
 * --master / weight_store_open lists; `weightctl status` asks the first
 * master that answers (the standby) and lists every master, in --json as
 * an array; "dead,real" (a missing socket, a
 * refused TCP port) works; only dead endpoints fail with an error naming
 * each of them, within the call's timeout; "electing" alone fails with
 * SMP_ENOTLEADER once its timeout is spent; a mutation whose request
 * reached the dropper is not sent again (transport error, the real master
 * never saw it) while a query is; a store_node given "standby" registers
 * with the real master, and again, without a restart, after the master
 * went away and came back; a node registered through "proxy" registers
 * with the real master by itself once its poll is answered NOT_LEADER;
 * while no leader is known, the pauses between attempts double from 20 ms
 * to 100 ms, or to a connection's follow_pause_max_ms (a node's 20 ms); a
 * named leader is followed without a pause, unless the name before led to
 * another NOT_LEADER; a lookup refused SMP_EBUSY is asked again and
 * answered once the master answers it, and refused after about 1 s (some
 * 20 lookups) of refusals;
 * bad lists are refused naming the item. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "host_rpc.pb-c.h"
#include "rpc.pb-c.h"
#include "rpc_client.h"
#include "weightclient.h"

#define WAIT_MS 10000 /* generous bound for an asynchronous effect */
#define FAKE_CONNS 16

/* -- the fake masters ------------------------------------------------------ */

typedef enum fake_kind {
    FAKE_STANDBY,
    FAKE_ELECTING,
    FAKE_DROPPER,
    FAKE_PROXY,
    FAKE_STALLING
} fake_kind;

typedef struct fake {
    fake_kind kind;
    char path[320];
    char leader[320];        /* what STANDBY names */
    int lfd;
    int stop[2];             /* a pipe: written to stop the thread */
    pthread_t thread;
    atomic_int requests;     /* whole requests read */
    atomic_int redirects;    /* NOT_LEADER answers given */
    atomic_int deposed;      /* PROXY: answers as a standby from now on */
    atomic_int silent;       /* PROXY: reads requests and answers none (paused) */
    atomic_int busy;         /* PROXY: lookups still to answer SMP_EBUSY */
    atomic_int busied;       /* PROXY: lookups answered SMP_EBUSY */
    struct {
        int fd;
        uint8_t buf[1 << 16];
        size_t len;
        int up;              /* PROXY: the connection to the real master */
        uint8_t ubuf[1 << 16];
        size_t ulen;
    } conns[FAKE_CONNS];
} fake;

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The standby's StatusResponse: three masters, itself lagging, one that
 * cannot replay. Packed into out (2048 bytes); its length. */
static size_t fake_status(const fake *f, uint8_t *out)
{
    StatusResponse st = STATUS_RESPONSE__INIT;
    MasterInfo m1 = MASTER_INFO__INIT, m2 = MASTER_INFO__INIT, m3 = MASTER_INFO__INIT;
    MasterInfo *all[] = {&m1, &m2, &m3};
    st.role = "standby";
    st.nodes = 1;
    st.master_id = "m2";
    st.applied_seq = 40;
    st.oplog_last_seq = 40;
    st.leader = (char *)f->leader;
    m1.id = "m1", m1.role = "leader", m1.endpoint = (char *)f->leader;
    m1.applied_seq = 42, m1.lag = 0, m1.ready = 1;
    m2.id = "m2", m2.role = "standby", m2.endpoint = (char *)f->path;
    m2.applied_seq = 40, m2.lag = 2, m2.ready = 1;
    m3.id = "m3", m3.role = "standby", m3.endpoint = "10.0.0.3:7600";
    m3.applied_seq = 17, m3.lag = 25, m3.ready = 0;
    m3.reason = "record 18 has type 12 (WEIGHT_LINEAGE_CLAIM) but no loaded plugin replays it";
    st.n_masters = 3;
    st.masters = all;
    return status_response__pack(&st, out);
}

/* An auth.HELLO without a token: a client asking whether the master is
 * there (and who it is), which every master answers. */
static int is_question(const RpcRequest *req)
{
    if (req->service != HOST_SERVICE__HOST_SERVICE_AUTH || req->method != AUTH_METHOD__AUTH_HELLO)
        return 0;
    AuthHelloRequest *h = auth_hello_request__unpack(NULL, req->body.len, req->body.data);
    int empty = h != NULL && h->token.len == 0;
    auth_hello_request__free_unpacked(h, NULL);
    return empty;
}

/* Take the whole frames buffered on connection i; 0, or -1 to close it. */
static int fake_frames(fake *f, int i)
{
    uint8_t *b = f->conns[i].buf;
    size_t *len = &f->conns[i].len;
    while (*len >= 4) {
        uint32_t n = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        if (n > sizeof(f->conns[i].buf) - 4) return -1;
        if (*len < 4 + (size_t)n) return 0;
        RpcRequest *req = rpc_request__unpack(NULL, n, b + 4);
        if (req == NULL) return -1;
        atomic_fetch_add(&f->requests, 1);
        int busy = f->kind == FAKE_PROXY && req->service == HOST_SERVICE__HOST_SERVICE_OBJECTS &&
                   req->method == OBJECTS_METHOD__OBJ_GET_REPLICAS && atomic_load(&f->busy) > 0;
        if (f->kind == FAKE_PROXY && !atomic_load(&f->deposed) && !busy) {
            rpc_request__free_unpacked(req, NULL);
            if (!atomic_load(&f->silent) && write_all(f->conns[i].up, b, 4 + (size_t)n) < 0)
                return -1;
            memmove(b, b + 4 + n, *len - 4 - n);
            *len -= 4 + (size_t)n;
            continue;
        }
        RpcResponse resp = RPC_RESPONSE__INIT;
        uint8_t out[4096], status_body[2048];
        resp.request_id = req->request_id;
        if (f->kind != FAKE_STALLING && is_question(req)) {
            /* Any live master answers the first request a client sends on
             * a socket of a list (auth.HELLO without a token) itself, and
             * says whether it leads: the standbys name their leader. */
            AuthHelloResponse hello = AUTH_HELLO_RESPONSE__INIT;
            int standby = f->kind == FAKE_STANDBY || f->kind == FAKE_ELECTING;
            hello.leadership = standby ? 2 : 1;
            hello.leader = f->kind == FAKE_STANDBY ? f->leader : "";
            resp.body.len = auth_hello_response__pack(&hello, status_body);
            resp.body.data = status_body;
        } else if (busy) {
            /* a change that frees the object's bytes is being made durable */
            atomic_fetch_sub(&f->busy, 1);
            atomic_fetch_add(&f->busied, 1);
            resp.status = SMP_EBUSY;
            resp.error = "get replicas: its bytes are about to be freed";
        } else if (f->kind == FAKE_DROPPER) {
            rpc_request__free_unpacked(req, NULL);
            return -1; /* the request arrived; the answer never comes */
        } else if (f->kind == FAKE_STALLING) {
            rpc_request__free_unpacked(req, NULL);
            if (atomic_load(&f->requests) == 1) return -1; /* the first: dropped */
            memmove(b, b + 4 + n, *len - 4 - n);           /* the others: never answered */
            *len -= 4 + (size_t)n;
            continue;
        } else if (f->kind == FAKE_STANDBY && req->service == HOST_SERVICE__HOST_SERVICE_ADMIN &&
                   req->method == ADMIN_METHOD__ADMIN_STATUS) {
            /* A standby answers status itself, with the cluster it sees. */
            resp.body.len = fake_status(f, status_body);
            resp.body.data = status_body;
        } else {
            resp.status = SMP_ENOTLEADER;
            resp.error = f->kind != FAKE_ELECTING ? "this master is a standby"
                                                  : "this master is a standby; no leader is known";
            resp.leader = f->kind != FAKE_ELECTING ? f->leader : "";
            atomic_fetch_add(&f->redirects, 1);
        }
        rpc_request__free_unpacked(req, NULL);
        size_t m = rpc_response__pack(&resp, out + 4);
        put_be32(out, (uint32_t)m);
        if (write_all(f->conns[i].fd, out, 4 + m) < 0) return -1;
        memmove(b, b + 4 + n, *len - 4 - n);
        *len -= 4 + (size_t)n;
    }
    return 0;
}

/* PROXY: pass the real master's whole frames on to connection i; 0, or -1
 * to close it. */
static int fake_answers(fake *f, int i)
{
    uint8_t *b = f->conns[i].ubuf;
    size_t *len = &f->conns[i].ulen;
    while (*len >= 4) {
        uint32_t n = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        if (n > sizeof(f->conns[i].ubuf) - 4) return -1;
        if (*len < 4 + (size_t)n) return 0;
        if (write_all(f->conns[i].fd, b, 4 + (size_t)n) < 0) return -1;
        memmove(b, b + 4 + n, *len - 4 - n);
        *len -= 4 + (size_t)n;
    }
    return 0;
}

static int unix_connect(const char *path)
{
    struct sockaddr_un sa;
    size_t len = strlen(path);
    if (len >= sizeof(sa.sun_path)) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, len);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void fake_close_conn(fake *f, int i)
{
    close(f->conns[i].fd);
    if (f->conns[i].up >= 0) close(f->conns[i].up);
    f->conns[i].fd = -1;
    f->conns[i].up = -1;
    f->conns[i].len = 0;
    f->conns[i].ulen = 0;
}

static void *fake_main(void *arg)
{
    fake *f = arg;
    for (;;) {
        struct pollfd p[2 * FAKE_CONNS + 2];
        int map[2 * FAKE_CONNS + 2]; /* -2 stop, -1 listener, i a client, FAKE_CONNS + i its upstream */
        nfds_t n = 0;
        p[n] = (struct pollfd){.fd = f->stop[0], .events = POLLIN};
        map[n++] = -2;
        p[n] = (struct pollfd){.fd = f->lfd, .events = POLLIN};
        map[n++] = -1;
        for (int i = 0; i < FAKE_CONNS; i++) {
            if (f->conns[i].fd < 0) continue;
            p[n] = (struct pollfd){.fd = f->conns[i].fd, .events = POLLIN};
            map[n++] = i;
            if (f->conns[i].up < 0) continue;
            p[n] = (struct pollfd){.fd = f->conns[i].up, .events = POLLIN};
            map[n++] = FAKE_CONNS + i;
        }
        if (poll(p, n, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[0].revents) break;
        for (nfds_t k = 1; k < n; k++) {
            if (!p[k].revents) continue;
            if (map[k] == -1) {
                int fd = accept(f->lfd, NULL, NULL);
                int slot = -1;
                for (int i = 0; i < FAKE_CONNS && fd >= 0 && slot < 0; i++)
                    if (f->conns[i].fd < 0) slot = i;
                if (slot < 0) {
                    if (fd >= 0) close(fd);
                    continue;
                }
                f->conns[slot].fd = fd;
                f->conns[slot].len = 0;
                f->conns[slot].up = f->kind == FAKE_PROXY ? unix_connect(f->leader) : -1;
                if (f->kind == FAKE_PROXY && f->conns[slot].up < 0) fake_close_conn(f, slot);
                continue;
            }
            if (map[k] >= FAKE_CONNS) { /* the real master answered through the proxy */
                int i = map[k] - FAKE_CONNS;
                if (f->conns[i].fd < 0) continue; /* closed by its client just now */
                ssize_t r = recv(f->conns[i].up, f->conns[i].ubuf + f->conns[i].ulen,
                                 sizeof(f->conns[i].ubuf) - f->conns[i].ulen, 0);
                if (r < 0 && errno == EINTR) continue;
                if (r > 0) f->conns[i].ulen += (size_t)r;
                if (r <= 0 || fake_answers(f, i) < 0) fake_close_conn(f, i);
                continue;
            }
            int i = map[k];
            if (f->conns[i].fd < 0) continue;
            ssize_t r = recv(f->conns[i].fd, f->conns[i].buf + f->conns[i].len,
                             sizeof(f->conns[i].buf) - f->conns[i].len, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r > 0) f->conns[i].len += (size_t)r;
            if (r <= 0 || fake_frames(f, i) < 0) fake_close_conn(f, i);
        }
    }
    return NULL;
}

static fake *fake_start(const hx_master *m, const char *name, fake_kind kind)
{
    struct sockaddr_un sa;
    fake *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->kind = kind;
    snprintf(f->path, sizeof(f->path), "%s/%s.sock", m->dir, name);
    snprintf(f->leader, sizeof(f->leader), "%s", m->socket);
    for (int i = 0; i < FAKE_CONNS; i++) f->conns[i].fd = f->conns[i].up = -1;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    assert_true(strlen(f->path) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, f->path, strlen(f->path));
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(f->lfd >= 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(f->lfd, 16), 0);
    assert_int_equal(pipe(f->stop), 0);
    assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
    return f;
}

static void fake_stop(fake *f)
{
    if (f == NULL) return;
    assert_int_equal(write(f->stop[1], "x", 1), 1);
    pthread_join(f->thread, NULL);
    for (int i = 0; i < FAKE_CONNS; i++)
        if (f->conns[i].fd >= 0) fake_close_conn(f, i);
    close(f->lfd);
    close(f->stop[0]);
    close(f->stop[1]);
    unlink(f->path);
    free(f);
}

/* -- fixture ------------------------------------------------------------------- */

typedef struct fixture {
    hx_master m;
    fake *standby, *electing, *dropper;
    char dead[320];          /* a socket path nobody listens on */
    int round;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL || hx_init(&f->m, "haredirect", NULL) < 0) return -1;
    if (hx_start(&f->m, WAIT_MS) < 0) {
        hx_cleanup(&f->m);
        free(f);
        return -1;
    }
    f->standby = fake_start(&f->m, "standby", FAKE_STANDBY);
    f->electing = fake_start(&f->m, "electing", FAKE_ELECTING);
    f->dropper = fake_start(&f->m, "dropper", FAKE_DROPPER);
    snprintf(f->dead, sizeof(f->dead), "%s/dead.sock", f->m.dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f == NULL) return -1; /* setup failed */
    fake_stop(f->standby);
    fake_stop(f->electing);
    fake_stop(f->dropper);
    int rc = hx_stop(&f->m);
    hx_cleanup(&f->m);
    free(f);
    return rc == 0 ? 0 : -1;
}

/* -- helpers ------------------------------------------------------------------- */

static void list2(char *out, size_t cap, const char *a, const char *b)
{
    snprintf(out, cap, "%s,%s", a, b);
}

/* Put a fresh object through a client of `masters`, and check the real
 * master holds it. Returns the key (static). */
static const char *put_through(fixture *f, const char *masters)
{
    static char key[64];
    char err[1024] = "", content[64];
    kvc *c = NULL;
    snprintf(key, sizeof(key), "redirect/%d", ++f->round);
    snprintf(content, sizeof(content), "content %d", f->round);
    if (kvc_connect(masters, WAIT_MS, &c, err, sizeof(err)) < 0) fail_msg("connect %s: %s", masters, err);
    if (kvc_put_bytes(c, key, content, strlen(content), SMP_DATA_KV, NULL, 0, NULL) < 0)
        fail_msg("put through %s: %s", masters, kvc_error(c));
    assert_string_equal(kvc_endpoint(c), f->m.socket); /* it ended at the real master */
    kvc_close(c);

    kvc *real = hx_client(&f->m);
    char got[64];
    uint64_t len = 0;
    assert_non_null(real);
    assert_int_equal(kvc_get_into(real, key, got, sizeof(got), &len, 1), 0);
    assert_int_equal(len, strlen(content));
    assert_memory_equal(got, content, len);
    kvc_close(real);
    return key;
}

/* Run weightctl with args (NULL-terminated) and $WEIGHTCTL_MASTER set to
 * env_master (NULL: unset); its stdout and stderr go to *out (malloc'd,
 * caller frees). Returns its exit status. */
static int run_weightctl_env(fixture *f, const char *env_master, char **out,
                             const char *const *args)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/weightctl.out", f->m.dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const char *argv[16];
        size_t n = 0;
        argv[n++] = "weightctl";
        while (args[n - 1] != NULL && n < 15) {
            argv[n] = args[n - 1];
            n++;
        }
        argv[n] = NULL;
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        if (env_master != NULL) setenv("WEIGHTCTL_MASTER", env_master, 1);
        else unsetenv("WEIGHTCTL_MASTER");
        execv(BUILD_DIR "/bin/weightctl", (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char *buf = calloc(1, 1 << 16);
    assert_non_null(buf);
    size_t r = fread(buf, 1, (1 << 16) - 1, fp);
    buf[r] = '\0';
    fclose(fp);
    *out = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int run_weightctl(fixture *f, char **out, const char *const *args)
{
    return run_weightctl_env(f, NULL, out, args);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* -- tests --------------------------------------------------------------------- */

/* A call sent to a standby that names the leader is sent again there: with
 * the leader later in the list, and with the standby alone (the leader is
 * only known from its answer). */
static void test_standby_redirect_lands_on_the_leader(void **state)
{
    fixture *f = *state;
    char masters[700];
    int before = atomic_load(&f->standby->requests);
    list2(masters, sizeof(masters), f->standby->path, f->m.socket);
    put_through(f, masters);
    assert_true(atomic_load(&f->standby->requests) > before); /* it did ask the standby */
    before = atomic_load(&f->standby->requests);
    put_through(f, f->standby->path);
    assert_true(atomic_load(&f->standby->requests) > before);
    snprintf(masters, sizeof(masters), "unix:%s", f->standby->path);
    put_through(f, masters);
}

/* A standby that knows no leader: the next master of the list is asked. */
static void test_no_leader_known_moves_to_the_next_master(void **state)
{
    fixture *f = *state;
    char masters[700];
    int before = atomic_load(&f->electing->requests);
    list2(masters, sizeof(masters), f->electing->path, f->m.socket);
    put_through(f, masters);
    assert_true(atomic_load(&f->electing->requests) > before);
}

/* A master that does not answer at all is skipped: a missing socket, a
 * refused TCP port. */
static void test_dead_endpoints_are_skipped(void **state)
{
    fixture *f = *state;
    char masters[700];
    list2(masters, sizeof(masters), f->dead, f->m.socket);
    put_through(f, masters);
    list2(masters, sizeof(masters), "127.0.0.1:1", f->m.socket);
    put_through(f, masters);
}

/* Only dead endpoints: an error naming each of them, within the timeout. */
static void test_only_dead_endpoints_fail_naming_them(void **state)
{
    fixture *f = *state;
    char masters[700], err[1024] = "";
    kvc *c = NULL;
    list2(masters, sizeof(masters), f->dead, "127.0.0.1:1");
    int64_t t0 = now_ms();
    int rc = kvc_connect(masters, 1500, &c, err, sizeof(err));
    int64_t took = now_ms() - t0;
    assert_int_equal(rc, SMP_EIO);
    assert_null(c);
    assert_non_null(strstr(err, "no master answered"));
    assert_non_null(strstr(err, f->dead));
    assert_non_null(strstr(err, "127.0.0.1:1"));
    assert_true(took < WAIT_MS); /* bounded by its timeout, not hanging */

    char *out = NULL;
    const char *args[] = {"--master", masters, "status", NULL};
    assert_int_equal(run_weightctl(f, &out, args), 1);
    assert_non_null(strstr(out, "cannot reach the master"));
    assert_non_null(strstr(out, "no master answered"));
    free(out);
}

/* Only dead endpoints, the last round cut short by the call's deadline:
 * "stalling" closes the connection of the first round's auth.HELLO and
 * never answers the second's, which the call's deadline ends. The round
 * that finished decides: SMP_EIO with its causes, not a timeout (the
 * deadline ended that attempt, not the master). Under -j4 on two cores
 * test_only_dead_endpoints_fail_naming_them got SMP_EAGAIN so: its last
 * round's connect to the refused port was still in progress when the
 * deadline passed. */
static void test_a_round_the_deadline_cuts_short_decides_nothing(void **state)
{
    fixture *f = *state;
    fake *stalling = fake_start(&f->m, "stalling", FAKE_STALLING);
    char masters[700], err[1024] = "";
    kvc *c = NULL;
    list2(masters, sizeof(masters), f->dead, stalling->path);
    int rc = kvc_connect_token(masters, 1500, "any-token", &c, err, sizeof(err));
    int requests = atomic_load(&stalling->requests);
    fake_stop(stalling);
    assert_int_equal(rc, SMP_EIO);
    assert_null(c);
    assert_true(requests >= 2); /* a second round reached it, and the deadline ended it */
    assert_non_null(strstr(err, "no master answered"));
    assert_non_null(strstr(err, f->dead));
    assert_non_null(strstr(err, "closed by the server"));
    assert_null(strstr(err, "no response within"));
}

/* A standby alone that never learns the leader: the call ends with its
 * answer once the timeout is spent. */
static void test_no_leader_ever_fails_with_not_leader(void **state)
{
    fixture *f = *state;
    char err[512] = "";
    kvc *c = NULL;
    assert_int_equal(kvc_connect(f->electing->path, 1000, &c, err, sizeof(err)), 0);
    int exists = 0;
    assert_int_equal(kvc_exists(c, "redirect/none", &exists), SMP_ENOTLEADER);
    assert_non_null(strstr(kvc_error(c), "no leader is known"));
    assert_false(kvc_transport_failed(c));
    kvc_close(c);
}

/* nanosleep(2) as asked for by the thread g_pauses_of while g_pauses_on:
 * the pauses the client makes between its attempts (--wrap, see
 * tests/CMakeLists.txt). What was asked, not a time measured. */
#define MAX_PAUSES 64
static pthread_t g_pauses_of;
static atomic_int g_pauses_on, g_n_pauses;
static long g_pauses_ms[MAX_PAUSES];
int __real_nanosleep(const struct timespec *req, struct timespec *rem);
int __wrap_nanosleep(const struct timespec *req, struct timespec *rem)
{
    if (atomic_load(&g_pauses_on) && pthread_equal(pthread_self(), g_pauses_of)) {
        int i = atomic_fetch_add(&g_n_pauses, 1);
        if (i < MAX_PAUSES) g_pauses_ms[i] = (long)req->tv_sec * 1000 + req->tv_nsec / 1000000;
    }
    return __real_nanosleep(req, rem);
}

/* A call to a standby that never learns the leader, on a connection opened
 * with follow_pause_max_ms cap (0: the default); the pauses it asked for
 * into g_pauses_ms, their number returned. */
static int pauses_of_a_call(const fixture *f, int cap)
{
    rpcc_options o = {.timeout_ms = 700, .follow_pause_max_ms = cap};
    rpcc_conn *c = NULL;
    char err[256];
    int st = 0;
    assert_int_equal(rpcc_connect(f->electing->path, &o, &c, err, sizeof(err)), SMP_OK);
    g_pauses_of = pthread_self();
    atomic_store(&g_n_pauses, 0);
    atomic_store(&g_pauses_on, 1);
    int rc = rpcc_call(c, HOST_SERVICE__HOST_SERVICE_ADMIN, ADMIN_METHOD__ADMIN_STATUS, NULL, 0,
                       &st, NULL, NULL, NULL);
    atomic_store(&g_pauses_on, 0);
    rpcc_close(c);
    assert_int_equal(rc, SMP_OK);
    assert_int_equal(st, SMP_ENOTLEADER);
    int n = atomic_load(&g_n_pauses);
    return n < MAX_PAUSES ? n : MAX_PAUSES;
}

/* While no leader is known a call tries again after 20, 40 and 80 ms, then
 * every 100 ms; a connection opened with follow_pause_max_ms 20 (a node's)
 * every 20 ms, and one below 20 is taken as 20. The last pause, which the
 * call's deadline may cut short, is not compared. */
static void test_pauses_while_no_leader_is_known(void **state)
{
    static const long doubling[] = {20, 40, 80, 100, 100};
    fixture *f = *state;
    int n = pauses_of_a_call(f, 0);
    assert_true(n >= 5);
    for (int i = 0; i < n - 1; i++) {
        long want = doubling[i < 4 ? i : 4];
        if (g_pauses_ms[i] > want || g_pauses_ms[i] < want - 1)
            fail_msg("pause %d of the default: %ld ms, not %ld", i, g_pauses_ms[i], want);
    }
    for (int cap = 1; cap <= 20; cap += 19) {
        n = pauses_of_a_call(f, cap);
        assert_true(n >= 10);
        for (int i = 0; i < n - 1; i++)
            if (g_pauses_ms[i] > 20 || g_pauses_ms[i] < 19)
                fail_msg("pause %d with the cap at %d ms: %ld ms, not 20", i, cap, g_pauses_ms[i]);
    }
}

/* The pauses a query through the list `masters` asked for (into
 * g_pauses_ms), their number returned; the query must reach the real
 * master. */
static int pauses_through(const fixture *f, const char *masters)
{
    char err[1024] = "";
    kvc *c = NULL;
    int exists = 1;
    if (kvc_connect(masters, WAIT_MS, &c, err, sizeof(err)) < 0) fail_msg("connect %s: %s", masters, err);
    g_pauses_of = pthread_self();
    atomic_store(&g_n_pauses, 0);
    atomic_store(&g_pauses_on, 1);
    int rc = kvc_exists(c, "redirect/nothing-here", &exists);
    atomic_store(&g_pauses_on, 0);
    assert_int_equal(rc, 0);
    assert_int_equal(exists, 0);
    assert_string_equal(kvc_endpoint(c), f->m.socket);
    kvc_close(c);
    int n = atomic_load(&g_n_pauses);
    return n < MAX_PAUSES ? n : MAX_PAUSES;
}

/* A standby that names the leader is followed at once, even after moves
 * that paused; a name that leads to another NOT_LEADER is not trusted twice
 * in a row without a pause. "electing, standby, real": electing names no
 * one (the first move never pauses), standby names the real master: no
 * pause (20 ms before). "electing, standby2, ...": standby2 names standby,
 * which names the real master: the second name in a row pauses, once. */
static void test_a_named_leader_is_followed_without_a_pause(void **state)
{
    fixture *f = *state;
    char masters[1400];
    snprintf(masters, sizeof(masters), "%s,%s,%s", f->electing->path, f->standby->path, f->m.socket);
    int n = pauses_through(f, masters);
    if (n != 0) fail_msg("%d pause(s) on the way to a named leader, the first %ld ms", n, g_pauses_ms[0]);
    fake *standby2 = fake_start(&f->m, "standby2", FAKE_STANDBY);
    snprintf(standby2->leader, sizeof(standby2->leader), "%s", f->standby->path);
    snprintf(masters, sizeof(masters), "%s,%s,%s,%s", f->electing->path, standby2->path,
             f->standby->path, f->m.socket);
    int before = atomic_load(&standby2->redirects);
    n = pauses_through(f, masters);
    assert_int_equal(atomic_load(&standby2->redirects), before + 1); /* it was asked */
    assert_int_equal(n, 1);
    assert_true(g_pauses_ms[0] >= 39 && g_pauses_ms[0] <= 40); /* the third move's */
    fake_stop(standby2);
}

/* A leader that dies after a request reached it: a mutation is not sent
 * again (it may have been applied; here it was not, and stays so), a query
 * is sent to the next master. */
static void test_lost_mutation_is_not_resent_but_a_query_is(void **state)
{
    fixture *f = *state;
    char masters[700], err[512] = "";
    const char *key = put_through(f, f->m.socket);
    kvc *c = NULL;
    list2(masters, sizeof(masters), f->dropper->path, f->m.socket);

    assert_int_equal(kvc_connect(masters, WAIT_MS, &c, err, sizeof(err)), 0);
    int before = atomic_load(&f->dropper->requests);
    assert_int_equal(kvc_remove(c, key), SMP_EIO);
    assert_true(kvc_transport_failed(c));
    assert_int_equal(atomic_load(&f->dropper->requests), before + 1);
    /* the next call reconnects (nothing of it left before) to the leader */
    int exists = 0;
    assert_int_equal(kvc_exists(c, key, &exists), 0);
    assert_int_equal(exists, 1); /* the remove was never sent again */
    assert_string_equal(kvc_endpoint(c), f->m.socket);
    kvc_close(c);

    assert_int_equal(kvc_connect(masters, WAIT_MS, &c, err, sizeof(err)), 0);
    before = atomic_load(&f->dropper->requests);
    exists = 0;
    assert_int_equal(kvc_exists(c, key, &exists), 0); /* lost at the dropper, asked again */
    assert_int_equal(exists, 1);
    assert_int_equal(atomic_load(&f->dropper->requests), before + 1);
    kvc_close(c);
}

/* A fake "proxy" of its own (name), and a connection through the list
 * "proxy, other" that is at the proxy; then the proxy goes silent (a
 * paused leader). */
static kvc *through_then_silent(fixture *f, const char *name, const char *other, int timeout_ms,
                                const char *key, fake **proxy)
{
    char masters[700], err[512] = "";
    kvc *c = NULL;
    int exists = 0;
    *proxy = fake_start(&f->m, name, FAKE_PROXY);
    list2(masters, sizeof(masters), (*proxy)->path, other);
    if (kvc_connect(masters, timeout_ms, &c, err, sizeof(err)) < 0) fail_msg("connect: %s", err);
    int rc = kvc_exists(c, key, &exists);
    if (rc != 0) fail_msg("exists through %s: %d (%s)", masters, rc, kvc_error(c));
    assert_int_equal(exists, 1);
    assert_string_equal(kvc_endpoint(c), (*proxy)->path);
    atomic_store(&(*proxy)->silent, 1);
    return c;
}

/* A leader that goes silent under a call, its connection kept (paused,
 * hung). A call that waited 2 s asks another master of the list whether it
 * still leads: "proxy, real": the real master leads, answers the query,
 * and the client stays there -- and a new connection of the process given
 * that list does not try the silent proxy first; "proxy, standby" (naming
 * the real master): the query goes to the master named; "proxy, loyal" (a
 * standby naming the proxy: the leader is slow, not gone): it waits for the
 * proxy to its timeout, and then leaves it. A put start, not sent twice,
 * fails once the real master is found to lead, without waiting for its
 * timeout; the next call goes to the real master, and the put was not
 * applied. */
static void test_a_silent_master_is_passed_over(void **state)
{
    fixture *f = *state;
    fake *loyal = fake_start(&f->m, "loyal", FAKE_STANDBY), *proxy;
    const char *key = put_through(f, f->m.socket);
    char masters[700], err[512] = "";
    int exists = 0;

    kvc *c = through_then_silent(f, "silent1", f->m.socket, WAIT_MS, key, &proxy);
    assert_int_equal(kvc_exists(c, key, &exists), 0);
    assert_int_equal(exists, 1);
    assert_string_equal(kvc_endpoint(c), f->m.socket);
    kvc_close(c);
    int before = atomic_load(&proxy->requests);
    list2(masters, sizeof(masters), proxy->path, f->m.socket);
    if (kvc_connect(masters, WAIT_MS, &c, err, sizeof(err)) < 0) fail_msg("connect: %s", err);
    assert_int_equal(kvc_exists(c, key, &exists), 0);
    assert_string_equal(kvc_endpoint(c), f->m.socket);
    assert_int_equal(atomic_load(&proxy->requests), before); /* not asked first */
    kvc_close(c);
    fake_stop(proxy);

    c = through_then_silent(f, "silent2", f->standby->path, WAIT_MS, key, &proxy);
    before = atomic_load(&f->standby->requests);
    exists = 0;
    assert_int_equal(kvc_exists(c, key, &exists), 0);
    assert_int_equal(exists, 1);
    assert_string_equal(kvc_endpoint(c), f->m.socket);
    assert_true(atomic_load(&f->standby->requests) > before);
    kvc_close(c);
    fake_stop(proxy);

    snprintf(loyal->leader, sizeof(loyal->leader), "%s/silent3.sock", f->m.dir);
    c = through_then_silent(f, "silent3", loyal->path, 5000, key, &proxy);
    before = atomic_load(&loyal->requests);
    int rc = kvc_exists(c, key, &exists);
    if (rc != SMP_EAGAIN || strstr(kvc_error(c), "(the next call tries the other masters)") == NULL)
        fail_msg("a query at a slow leader: %d (%s)", rc, kvc_error(c));
    assert_true(atomic_load(&loyal->requests) > before); /* it was asked */
    kvc_close(c);
    fake_stop(proxy);

    c = through_then_silent(f, "silent4", f->m.socket, WAIT_MS, key, &proxy);
    rc = kvc_put_bytes(c, "redirect/silent-put", "x", 1, SMP_DATA_KV, NULL, 0, NULL);
    if (rc != SMP_EIO || strstr(kvc_error(c), " leads now: whether the request was applied is "
                                              "not known (it is not sent again)") == NULL)
        fail_msg("a put at a silent leader: %d (%s)", rc, kvc_error(c));
    exists = 1;
    assert_int_equal(kvc_exists(c, "redirect/silent-put", &exists), 0);
    assert_int_equal(exists, 0);
    assert_string_equal(kvc_endpoint(c), f->m.socket);
    kvc_close(c);
    fake_stop(proxy);
    fake_stop(loyal);
}

/* weightctl: --master lists for kv and status; bad lists name the item. */
static void test_weightctl_follows_the_list(void **state)
{
    fixture *f = *state;
    char masters[700], file[400], back[400], key[64];
    char *out = NULL;
    snprintf(file, sizeof(file), "%s/blob.in", f->m.dir);
    snprintf(back, sizeof(back), "%s/blob.out", f->m.dir);
    snprintf(key, sizeof(key), "redirect/ctl-%d", ++f->round);
    FILE *fp = fopen(file, "w");
    assert_non_null(fp);
    fputs("bytes through a standby", fp);
    fclose(fp);

    list2(masters, sizeof(masters), f->standby->path, f->m.socket);
    const char *put[] = {"--master", masters, "kv", "put", key, file, NULL};
    assert_int_equal(run_weightctl(f, &out, put), 0);
    free(out);
    const char *get[] = {"--master", f->standby->path, "kv", "get", key, back, NULL};
    assert_int_equal(run_weightctl(f, &out, get), 0);
    free(out);
    fp = fopen(back, "r");
    assert_non_null(fp);
    char got[64] = "";
    assert_non_null(fgets(got, sizeof(got), fp));
    fclose(fp);
    assert_string_equal(got, "bytes through a standby");

    /* status: the real master answers (the fakes refuse status too); no HA:
     * the single master's block, no masters table */
    list2(masters, sizeof(masters), f->dead, f->m.socket);
    const char *status[] = {"--master", masters, "status", NULL};
    assert_int_equal(run_weightctl(f, &out, status), 0);
    char line[400];
    snprintf(line, sizeof(line), "master    %s (active)", f->m.socket);
    assert_non_null(strstr(out, line));
    assert_null(strstr(out, "masters"));
    free(out);
    const char *json[] = {"--master", masters, "--json", "status", NULL};
    assert_int_equal(run_weightctl(f, &out, json), 0);
    assert_non_null(strstr(out, "\"role\":\"active\""));
    assert_null(strstr(out, "\"masters\""));
    free(out);

    snprintf(masters, sizeof(masters), "%s,,%s", f->standby->path, f->m.socket);
    const char *bad[] = {"--master", masters, "status", NULL};
    assert_int_equal(run_weightctl(f, &out, bad), 2);
    assert_non_null(strstr(out, "item 2 is empty"));
    free(out);
    const char *badport[] = {"--master", "127.0.0.1:99999", "kv", "ls", NULL};
    assert_int_equal(run_weightctl(f, &out, badport), 2);
    assert_non_null(strstr(out, "port '99999'"));
    free(out);

    /* $WEIGHTCTL_MASTER takes the list too */
    list2(masters, sizeof(masters), f->electing->path, f->standby->path);
    const char *ls[] = {"kv", "ls", "redirect/", NULL};
    assert_int_equal(run_weightctl_env(f, masters, &out, ls), 0);
    assert_non_null(strstr(out, key));
    free(out);
    assert_int_equal(run_weightctl_env(f, "a:1,b:2,", &out, ls), 2);
    assert_non_null(strstr(out, "item 3 is empty"));
    free(out);
}

/* status is answered by the first master that answers, a standby too, and
 * shows every master of the cluster it sees. */
static void test_status_lists_every_master(void **state)
{
    fixture *f = *state;
    char masters[700], line[800];
    char *out = NULL;
    list2(masters, sizeof(masters), f->standby->path, f->m.socket);
    const char *status[] = {"--master", masters, "status", NULL};
    assert_int_equal(run_weightctl(f, &out, status), 0);
    snprintf(line, sizeof(line), "master    %s (standby, id m2, applied seq 40)", f->standby->path);
    assert_non_null(strstr(out, line));
    snprintf(line, sizeof(line), "leader    %s", f->m.socket);
    assert_non_null(strstr(out, line));
    assert_non_null(strstr(out, "masters   3"));
    assert_non_null(strstr(out, "ROLE"));
    assert_non_null(strstr(out, "leader "));
    assert_non_null(strstr(out, "no: record 18 has type 12"));
    assert_non_null(strstr(out, "10.0.0.3:7600"));
    /* the leader it names is no HA leader (the real master is "active"):
     * the standby's view stays, saying whose the nodes are */
    snprintf(line, sizeof(line), "nodes     - (they register with the leader, %s)", f->m.socket);
    assert_non_null(strstr(out, line));
    assert_non_null(strstr(out, "\nmemory    - (the leader's nodes')\n"));
    snprintf(line, sizeof(line), "\nnote      this is a standby's view: the leader it names, %s, "
             "says it is active\n", f->m.socket);
    assert_non_null(strstr(out, line));
    /* every endpoint of the list is a registered master */
    assert_null(strstr(out, "no master registered it"));
    free(out);

    /* an endpoint of the list no master registered (a master gone, paused
     * past its lease) is named after the table, and in the JSON */
    char gone[700], with_gone[1500];
    snprintf(gone, sizeof(gone), "%s/gone.sock", f->m.dir);
    snprintf(with_gone, sizeof(with_gone), "%s,%s", masters, gone);
    const char *status_gone[] = {"--master", with_gone, "status", NULL};
    assert_int_equal(run_weightctl(f, &out, status_gone), 0);
    snprintf(line, sizeof(line), "  %s of --master: no master registered it (down, paused past "
             "its lease", gone);
    if (strstr(out, line) == NULL) fail_msg("status does not name %s: %s", gone, out);
    free(out);
    const char *json_gone[] = {"--master", with_gone, "--json", "status", NULL};
    assert_int_equal(run_weightctl(f, &out, json_gone), 0);
    snprintf(line, sizeof(line), "\"unregistered\":[\"%s\"]", gone);
    if (strstr(out, line) == NULL) fail_msg("status --json does not name %s: %s", gone, out);
    free(out);

    const char *json[] = {"--master", masters, "--json", "status", NULL};
    assert_int_equal(run_weightctl(f, &out, json), 0);
    assert_non_null(strstr(out, "\"unregistered\":[]"));
    assert_non_null(strstr(out, "\"role\":\"standby\",\"nodes\":null,\"segments\":null,"
                                "\"memory_capacity\":null,\"memory_used\":null,"));
    assert_non_null(strstr(out, "\"master_id\":\"m2\",\"applied_seq\":40"));
    assert_non_null(strstr(out, "\"masters\":[{\"id\":\"m1\",\"role\":\"leader\""));
    assert_non_null(strstr(out, "\"id\":\"m3\",\"role\":\"standby\",\"endpoint\":\"10.0.0.3:7600\","
                                "\"applied_seq\":17,\"lag\":25,\"ready\":false"));
    free(out);

    kvc *c = NULL;
    char err[512];
    kvc_status st;
    assert_int_equal(kvc_connect(masters, WAIT_MS, &c, err, sizeof(err)), 0);
    assert_int_equal(kvc_status_get(c, &st), 0);
    assert_string_equal(st.role, "standby");
    assert_int_equal(st.n_masters, 3);
    assert_int_equal(st.masters[2].lag, 25);
    assert_false(st.masters[2].ready);
    assert_string_equal(kvc_endpoint(c), f->standby->path); /* status stayed there */
    kvc_close(c);
}

/* libweightclient: weight_store_open takes the list; its calls reach the
 * leader through a standby. */
static void test_weight_store_opens_a_list(void **state)
{
    fixture *f = *state;
    char masters[700], err[512] = "";
    weight_store *s = NULL;
    weight_identity id;
    int exists = -1;
    list2(masters, sizeof(masters), f->standby->path, f->m.socket);
    assert_int_equal(weight_store_open(f->standby->path, NULL, NULL, &s, err, sizeof(err)), 0);
    assert_int_equal(weight_identity_set(&id, "", "ns", "model", "r1", 1), 0);
    int before = atomic_load(&f->standby->requests);
    assert_int_equal(weight_is_exist(s, &id, &exists), 0);
    assert_int_equal(exists, 0);
    assert_true(atomic_load(&f->standby->requests) > before);
    weight_store_close(s);

    assert_int_equal(weight_store_open(masters, NULL, NULL, &s, err, sizeof(err)), 0);
    exists = -1;
    assert_int_equal(weight_is_exist(s, &id, &exists), 0);
    assert_int_equal(exists, 0);
    weight_store_close(s);

    snprintf(masters, sizeof(masters), "%s,nohost", f->m.socket);
    assert_int_equal(weight_store_open(masters, NULL, NULL, &s, err, sizeof(err)),
                     WEIGHT_EINVALID_ARGUMENT);
    assert_null(s);
    assert_non_null(strstr(err, "item 2"));
}

/* A store_node given only the standby registers with the leader it names. */
static void test_node_given_a_standby_registers_with_the_leader(void **state)
{
    fixture *f = *state;
    hx_master via = f->m; /* the same directory, the standby's socket */
    hx_node n;
    snprintf(via.socket, sizeof(via.socket), "%s", f->standby->path);
    int before = atomic_load(&f->standby->requests);
    assert_int_equal(hx_node_start(&via, &n, "n-redirect", 4ull << 20), 0);
    int rc = hx_wait_nodes(&f->m, 2, WAIT_MS);
    if (rc != 0) {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "cat %s >&2", n.log);
        if (system(cmd) != 0) fprintf(stderr, "(no node log)\n");
    }
    assert_int_equal(rc, 0);
    assert_true(atomic_load(&f->standby->requests) > before);

    /* The leader goes away and comes back: the node, still running, finds
     * it again through the standby and registers anew. */
    assert_int_equal(hx_stop(&f->m), 0);
    assert_int_equal(hx_start(&f->m, WAIT_MS), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, WAIT_MS), 0);
    assert_int_equal(hx_node_stop(&n), 0);
}

/* 1 when the file holds needle. */
/* A node attached to a master that is deposed (here: the proxy, which then
 * answers as a standby naming the real master) follows its poll's
 * NOT_LEADER answer and registers with the leader, still running. */
static void test_node_follows_a_new_leader_without_restart(void **state)
{
    fixture *f = *state;
    fake *proxy = fake_start(&f->m, "proxy", FAKE_PROXY);
    hx_master via = f->m;
    hx_node n;
    char needle[400];
    snprintf(via.socket, sizeof(via.socket), "%s", proxy->path);
    assert_int_equal(hx_wait_nodes(&f->m, 1, WAIT_MS), 0); /* an earlier test's node is gone */
    assert_int_equal(hx_node_start(&via, &n, "n-follow", 4ull << 20), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, WAIT_MS), 0);
    assert_true(atomic_load(&proxy->requests) > 0); /* registered through the proxy */
    assert_int_equal(atomic_load(&proxy->redirects), 0);

    atomic_store(&proxy->deposed, 1);
    snprintf(needle, sizeof(needle), "registering again at %s", f->m.socket);
    int seen = 0;
    for (int waited = 0; waited < WAIT_MS && !seen; waited += 20) {
        seen = hx_file_contains(n.log, needle);
        if (!seen) usleep(20 * 1000);
    }
    if (!seen) {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "cat %s >&2", n.log);
        if (system(cmd) != 0) fprintf(stderr, "(no node log)\n");
    }
    assert_true(seen);
    assert_true(atomic_load(&proxy->redirects) > 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, WAIT_MS), 0);
    assert_int_equal(hx_node_stop(&n), 0);
    fake_stop(proxy);
}

static void test_a_lookup_refused_busy_is_asked_again(void **state)
{
    fixture *f = *state;
    char err[512] = "";
    kvc *w = hx_client(&f->m), *c = NULL;
    kvc_object obj;
    assert_non_null(w);
    assert_int_equal(kvc_put_bytes(w, "kv/busy", "twelve bytes", 12, SMP_DATA_KV, NULL, 0, NULL), 0);
    kvc_close(w);
    fake *proxy = fake_start(&f->m, "busy", FAKE_PROXY);
    if (kvc_connect(proxy->path, WAIT_MS, &c, err, sizeof(err)) < 0) fail_msg("connect: %s", err);
    /* three refusals, then the real master's answer */
    atomic_store(&proxy->busy, 3);
    assert_int_equal(kvc_get(c, "kv/busy", &obj), 0);
    assert_int_equal(obj.size, 12);
    assert_int_equal(atomic_load(&proxy->busied), 3);
    /* refusals that do not end: SMP_EBUSY, after some 20 lookups */
    atomic_store(&proxy->busied, 0);
    atomic_store(&proxy->busy, 1000);
    assert_int_equal(kvc_get(c, "kv/busy", &obj), SMP_EBUSY);
    int asked = atomic_load(&proxy->busied);
    if (asked < 10 || asked > 40) fail_msg("a lookup refused busy was asked %d times", asked);
    atomic_store(&proxy->busy, 0);
    kvc_close(c);
    fake_stop(proxy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_standby_redirect_lands_on_the_leader),
        cmocka_unit_test(test_no_leader_known_moves_to_the_next_master),
        cmocka_unit_test(test_dead_endpoints_are_skipped),
        cmocka_unit_test(test_only_dead_endpoints_fail_naming_them),
        cmocka_unit_test(test_a_round_the_deadline_cuts_short_decides_nothing),
        cmocka_unit_test(test_no_leader_ever_fails_with_not_leader),
        cmocka_unit_test(test_pauses_while_no_leader_is_known),
        cmocka_unit_test(test_a_named_leader_is_followed_without_a_pause),
        cmocka_unit_test(test_lost_mutation_is_not_resent_but_a_query_is),
        cmocka_unit_test(test_a_silent_master_is_passed_over),
        cmocka_unit_test(test_weightctl_follows_the_list),
        cmocka_unit_test(test_status_lists_every_master),
        cmocka_unit_test(test_weight_store_opens_a_list),
        cmocka_unit_test(test_node_given_a_standby_registers_with_the_leader),
        cmocka_unit_test(test_node_follows_a_new_leader_without_restart),
        cmocka_unit_test(test_a_lookup_refused_busy_is_asked_again),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
