/* rpc_load.c -- identity reads against the master, or GETs against Redis,
 * from one epoll thread over many connections, one request in flight on
 * each (see rpc_load.h).
 *
 * The requests of RPC_LOAD_IDS random identities or keys are built once, as
 * redis-benchmark builds its command once and only swaps the key: for the
 * master the IdentityRequest body (a KeyRequest for an object lookup),
 * wrapped at each send in the RPC envelope and its 4-byte length; for Redis
 * the whole RESP command. Each reply is decoded and checked before the next
 * request goes out: the envelope and the body (protobuf-c's unpack, as
 * libweightclient does), or the bulk string and its value. */
#include "rpc_load.h"

#include "bench_clock.h"
#include "rpc_envelope.h"
#include "host_rpc.pb-c.h"
#include "wc_store.h"
#include "weight_rpc.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define RPC_LOAD_IDS 8192 /* a power of two */
#define RPC_LOAD_BUF 4096 /* a connection's receive buffer: one reply fits many times */
#define RPC_LOAD_MAX_CONNS 1024

typedef struct load_body {
    uint8_t *p;
    size_t len;
} load_body;

typedef struct load_conn {
    int fd;
    uint64_t next_id; /* the request id of the request in flight */
    size_t in_len;
    uint8_t in[RPC_LOAD_BUF];
} load_conn;

typedef struct load_run {
    const rpc_load_opts *o;
    load_body bodies[RPC_LOAD_IDS];
    uint64_t x; /* xorshift state picking the next identity */
    char *err;
    size_t errlen;
} load_run;

static int load_fail(load_run *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, r->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int load_redis(const load_run *r)
{
    return r->o->method == RPC_LOAD_REDIS_GET;
}

/* The next random number. */
static uint64_t load_rand(load_run *r)
{
    r->x ^= r->x << 13;
    r->x ^= r->x >> 7;
    r->x ^= r->x << 17;
    return r->x;
}

/* Build the request of every slot: a GET of a random key, or the packed
 * IdentityRequest of a random revision. 0 or -1. */
static int load_bodies(load_run *r)
{
    for (size_t i = 0; i < RPC_LOAD_IDS; i++) {
        long k = (long)(load_rand(r) % (uint64_t)r->o->n);
        if (load_redis(r)) {
            char key[32], cmd[96];
            int kl = snprintf(key, sizeof(key), "key:%ld", k);
            int n = snprintf(cmd, sizeof(cmd), "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", kl, key);
            if ((r->bodies[i].p = malloc((size_t)n)) == NULL) return load_fail(r, "out of memory");
            memcpy(r->bodies[i].p, cmd, (size_t)n);
            r->bodies[i].len = (size_t)n;
            continue;
        }
        char res[32];
        snprintf(res, sizeof(res), "model-%07ld", k);
        if (r->o->method == RPC_LOAD_OBJ_EXISTS) {
            char key[96];
            snprintf(key, sizeof(key), "weights/default/bench/%s/r1/1/manifest", res);
            KeyRequest kr = KEY_REQUEST__INIT;
            kr.key = key;
            size_t len = key_request__get_packed_size(&kr);
            if ((r->bodies[i].p = malloc(len)) == NULL) return load_fail(r, "out of memory");
            r->bodies[i].len = key_request__pack(&kr, r->bodies[i].p);
            continue;
        }
        Wmrpc__WeightIdentity id = WMRPC__WEIGHT_IDENTITY__INIT;
        id.tenant = "default";
        id.namespace_id = "bench";
        id.resource_id = res;
        id.revision = "r1";
        id.generation = 1;
        Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
        req.identity = &id;
        size_t len = wmrpc__identity_request__get_packed_size(&req);
        if ((r->bodies[i].p = malloc(len)) == NULL) return load_fail(r, "out of memory");
        r->bodies[i].len = wmrpc__identity_request__pack(&req, r->bodies[i].p);
    }
    return 0;
}

/* Send c's next request (a random identity). 0 or -1. */
static int load_send(load_run *r, load_conn *c)
{
    uint8_t frame[512];
    const load_body *b = &r->bodies[load_rand(r) & (RPC_LOAD_IDS - 1)];
    if (load_redis(r)) {
        ssize_t w = send(c->fd, b->p, b->len, MSG_NOSIGNAL);
        return w == (ssize_t)b->len ? 0 : load_fail(r, "send: %s", w < 0 ? strerror(errno) : "short");
    }
    int obj = r->o->method == RPC_LOAD_OBJ_EXISTS;
    uint32_t service = obj ? HOST_SERVICE__HOST_SERVICE_OBJECTS : WC_WEIGHT_SERVICE;
    uint32_t method = obj ? OBJECTS_METHOD__OBJ_EXISTS : r->o->method;
    size_t len = rpc_env_request_size(++c->next_id, service, method, b->len);
    if (len + 4 > sizeof(frame)) return load_fail(r, "a request of %zu bytes", len);
    rpc_env_encode_request(frame + 4, c->next_id, service, method, b->p, b->len);
    frame[0] = (uint8_t)(len >> 24);
    frame[1] = (uint8_t)(len >> 16);
    frame[2] = (uint8_t)(len >> 8);
    frame[3] = (uint8_t)len;
    /* One small frame on a socket with nothing else in flight: it goes whole. */
    ssize_t w = send(c->fd, frame, len + 4, MSG_NOSIGNAL);
    if (w != (ssize_t)(len + 4)) return load_fail(r, "send: %s", w < 0 ? strerror(errno) : "short");
    return 0;
}

/* Check one reply frame of c. 0 or -1. */
static int load_reply(load_run *r, load_conn *c, const uint8_t *frame, size_t len)
{
    rpc_env_response env;
    if (rpc_env_decode_response(frame, len, &env) < 0) return load_fail(r, "a reply does not decode");
    if (env.request_id != c->next_id) return load_fail(r, "a reply to request %llu, not %llu",
                                                       (unsigned long long)env.request_id,
                                                       (unsigned long long)c->next_id);
    if (env.status != 0)
        return load_fail(r, "a read answered status %d: %.*s", (int)env.status,
                         (int)env.body_len, env.body ? (const char *)env.body : "");
    if (r->o->method == RPC_LOAD_OBJ_EXISTS) {
        ExistsResponse *m = exists_response__unpack(NULL, env.body_len, env.body);
        int ok = m != NULL && m->exists;
        if (m) exists_response__free_unpacked(m, NULL);
        return ok ? 0 : load_fail(r, "an object lookup did not answer true");
    }
    if (r->o->method == WMRPC__WEIGHT_METHOD__WEIGHT_IS_EXIST) {
        Wmrpc__IsExistResponse *m = wmrpc__is_exist_response__unpack(NULL, env.body_len, env.body);
        int ok = m != NULL && m->exists;
        if (m) wmrpc__is_exist_response__free_unpacked(m, NULL);
        return ok ? 0 : load_fail(r, "is_exist did not answer true");
    }
    Wmrpc__MetadataResponse *m = wmrpc__metadata_response__unpack(NULL, env.body_len, env.body);
    int ok = m != NULL && m->metadata != NULL && m->metadata->identity != NULL;
    if (m) wmrpc__metadata_response__free_unpacked(m, NULL);
    return ok ? 0 : load_fail(r, "a metadata reply without the revision's metadata");
}

/* The bytes of the whole Redis reply at the start of p[0, n): a bulk
 * string "$LEN\r\n" LEN bytes "\r\n" holding "value:..."; 0 while it is
 * not all in, -1 (said in r) for any other reply. */
static long load_redis_reply(load_run *r, const uint8_t *p, size_t n)
{
    const uint8_t *eol = memchr(p, '\n', n);
    if (eol == NULL) return n < 32 ? 0 : load_fail(r, "a reply line of over 32 bytes");
    if (p[0] != '$' || eol == p || eol[-1] != '\r')
        return load_fail(r, "a GET answered %.*s", (int)(eol - p), (const char *)p);
    long len = atol((const char *)p + 1); /* the digits end at the \r */
    size_t head = (size_t)(eol - p) + 1;
    if (len < 0) return load_fail(r, "a GET of a key that is not there");
    if (len > 1024) return load_fail(r, "a value of %ld bytes", len);
    if (n < head + (size_t)len + 2) return 0;
    if (len < 6 || memcmp(p + head, "value:", 6) != 0) return load_fail(r, "a GET answered another value");
    return (long)(head + (size_t)len + 2);
}

/* The bytes of the whole RPC reply frame at the start of p[0, n), checked
 * (load_reply); 0 while it is not all in, -1 (said in r) for a bad one. */
static long load_rpc_reply(load_run *r, load_conn *c, const uint8_t *p, size_t n)
{
    if (n < 4) return 0;
    size_t len = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
    if (len == 0 || len + 4 > sizeof(c->in)) return load_fail(r, "a reply frame of %zu bytes", len);
    if (n < len + 4) return 0;
    return load_reply(r, c, p + 4, len) < 0 ? -1 : (long)(len + 4);
}

/* Read what c has and check every whole reply in it; *done gets their
 * count. 0 or -1. */
static int load_recv(load_run *r, load_conn *c, long *done)
{
    ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
    if (n == 0) return load_fail(r, "the server closed a connection");
    if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : load_fail(r, "recv: %s", strerror(errno));
    c->in_len += (size_t)n;
    size_t at = 0;
    *done = 0;
    while (c->in_len > at) {
        long whole = load_redis(r) ? load_redis_reply(r, c->in + at, c->in_len - at)
                                   : load_rpc_reply(r, c, c->in + at, c->in_len - at);
        if (whole < 0) return -1;
        if (whole == 0) break;
        at += (size_t)whole;
        (*done)++;
    }
    memmove(c->in, c->in + at, c->in_len - at);
    c->in_len -= at;
    return 0;
}

static int load_connect(load_run *r, load_conn *c)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(r->o->socket) >= sizeof(sa.sun_path)) return load_fail(r, "socket path too long");
    memcpy(sa.sun_path, r->o->socket, strlen(r->o->socket) + 1);
    if ((c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        fcntl(c->fd, F_SETFL, O_NONBLOCK) < 0)
        return load_fail(r, "connect %s: %s", r->o->socket, strerror(errno));
    return 0;
}

int rpc_load_run(const rpc_load_opts *o, rpc_load_result *out, char *err, size_t errlen)
{
    int rc = -1, ep = -1;
    load_run *r = calloc(1, sizeof(*r));
    load_conn *conns = o->conns > 0 && o->conns <= RPC_LOAD_MAX_CONNS
                           ? calloc((size_t)o->conns, sizeof(*conns))
                           : NULL;
    if (r == NULL || conns == NULL) {
        snprintf(err, errlen, "%s", r && conns == NULL ? "1..1024 connections" : "out of memory");
        goto free_all;
    }
    for (int i = 0; i < o->conns; i++) conns[i].fd = -1;
    r->o = o;
    r->x = 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
    r->err = err;
    r->errlen = errlen;
    if (load_bodies(r) < 0) goto free_all;
    if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        load_fail(r, "epoll_create1: %s", strerror(errno));
        goto free_all;
    }
    for (int i = 0; i < o->conns; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &conns[i]};
        if (load_connect(r, &conns[i]) < 0) goto free_all;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev) < 0) {
            load_fail(r, "epoll_ctl: %s", strerror(errno));
            goto free_all;
        }
    }
    double cpu0 = bench_rusage_s(RUSAGE_THREAD), t0 = bench_now_s(), end = t0 + o->seconds, t = t0;
    long replies = 0;
    for (int i = 0; i < o->conns; i++)
        if (load_send(r, &conns[i]) < 0) goto free_all;
    while (t < end) {
        struct epoll_event evs[64];
        int n = epoll_wait(ep, evs, 64, 100);
        if (n < 0 && errno != EINTR) {
            load_fail(r, "epoll_wait: %s", strerror(errno));
            goto free_all;
        }
        for (int k = 0; k < n; k++) {
            load_conn *c = evs[k].data.ptr;
            long done = 0;
            if (load_recv(r, c, &done) < 0) goto free_all;
            replies += done;
            if (done > 0 && load_send(r, c) < 0) goto free_all;
        }
        t = bench_now_s();
    }
    /* The requests still in flight are left unanswered: closing drops them. */
    out->replies = replies;
    out->seconds = t - t0;
    out->cpu_s = bench_rusage_s(RUSAGE_THREAD) - cpu0;
    rc = replies > 0 ? 0 : load_fail(r, "no reply in %.1f s", o->seconds);
free_all:
    for (int i = 0; conns != NULL && i < o->conns; i++)
        if (conns[i].fd >= 0) close(conns[i].fd);
    if (ep >= 0) close(ep);
    for (size_t i = 0; r != NULL && i < RPC_LOAD_IDS; i++) free(r->bodies[i].p);
    free(conns);
    free(r);
    return rc;
}
