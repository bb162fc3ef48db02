/* fuzz_auth.c -- fuzz target: the authenticated request path of a real
 * store_master (auth.HELLO, then requests judged by the connection's
 * identity; issue 19).
 *
 * One master with authentication on (four credentials: a reader and a
 * writer of tenant a, a writer of tenant b, an admin; the weight plugin and
 * the embedded node) and limits (16 KiB of unanswered request bytes per
 * connection, so frames announcing more take the skip path of a refused
 * frame, complete or cut off; 8 live revisions per tenant) serves the whole
 * run; every input is one connection.
 * The first byte (modulo 4) says what the rest is:
 *   0  raw bytes written to the socket of a connection that presented no
 *      token (HELLO frames, requests, garbage);
 *   1  a HELLO whose token is the next rest[0] bytes, then one request
 *      (service selector, method, body) on that connection;
 *   2  a HELLO with one of the four real tokens (the second byte picks it),
 *      then one request (service selector, method, body);
 *   3  a HELLO with the admin token, then raw bytes.
 * Besides the master staying alive and serving (as fuzz_rpc checks), the
 * target holds the answers to the rules the master itself lists
 * (auth.RULES, read once as the admin): no request other than HELLO is ever
 * answered with success on a connection whose token was missing or refused,
 * nor for a caller whose role is below the method's rule. Any of these
 * aborts the run with the input in ./fuzz-crash-input (driver.c) and the
 * master's log. */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz.h"
#include "harness.h"
#include "host_rpc.pb-c.h"
#include "kv_client.h"
#include "master_fuzz.h"
#include "rpc_client.h"
#include "rpc_envelope.h"

#define AUTH_SVC 4
#define HELLO 1
#define MAX_RULES 128

static hx_master master;
static int started;
static unsigned long inputs;

/* the real tokens, their roles (1 reader, 2 writer, 3 admin) */
static const char *const tokens[] = {"fz-a-reader-71", "fz-a-writer-72", "fz-b-writer-73",
                                     "fz-admin-74"};
static const int token_role[] = {1, 2, 2, 3};

static fzm_rule rules[MAX_RULES];
static size_t n_rules;

static void die(const char *what)
{
    fzm_die(&master, "fuzz_auth", what);
}

static void stop_master(void)
{
    if (!started) return;
    if (master.pid > 0) {
        fzm_check_serving(&master, "fuzz_auth");
        hx_stop(&master);
    }
    hx_cleanup(&master);
}

static void start_master(void)
{
    char yaml[2048], path[400], hex[4][65];
    FILE *tf;
    signal(SIGPIPE, SIG_IGN);
    if (hx_init(&master, "fuzz-auth", NULL) < 0) die("cannot make the master's directory");
    snprintf(path, sizeof(path), "%s/node.token", master.dir);
    if ((tf = fopen(path, "w")) == NULL) die("cannot write the node's token");
    fputs(tokens[3], tf);
    fclose(tf);
    for (int i = 0; i < 4; i++) {
        unsigned char d[32];
        hx_sha256(tokens[i], strlen(tokens[i]), d);
        for (int k = 0; k < 32; k++) sprintf(hex[i] + 2 * k, "%02x", d[k]);
    }
    snprintf(yaml, sizeof(yaml),
             "snapshot:\n  every_records: 200\n"
             "auth:\n  enabled: true\n  node_token_file: \"%s\"\n  tokens:\n"
             "    - {sha256: %s, tenant: a, role: reader}\n"
             "    - {sha256: %s, tenant: a, role: writer}\n"
             "    - {sha256: %s, tenant: b, role: writer}\n"
             "    - {sha256: %s, tenant: ops, role: admin}\n"
             "  limits:\n"
             "    connection: {inflight_bytes: 16384}\n"
             "    tenant: {max_revisions: 8}\n",
             path, hex[0], hex[1], hex[2], hex[3]);
    setenv("WEIGHT_TOKEN", tokens[3], 1);
    if (hx_reconfigure(&master, yaml) < 0 || hx_start(&master, 20000) < 0)
        die("cannot start the master");
    started = 1;
    atexit(stop_master);
    n_rules = fzm_load_rules(&master, "fuzz_auth", tokens[3], rules, MAX_RULES);
}

/* Append a framed request to out (cap bytes at out + *len). */
static void frame(uint8_t *out, size_t cap, size_t *len, uint64_t id, uint32_t service,
                  uint32_t method, const uint8_t *body, size_t blen)
{
    size_t need = rpc_env_request_size(id, service, method, blen);
    if (*len + 4 + need > cap) return;
    out[*len] = (uint8_t)(need >> 24);
    out[*len + 1] = (uint8_t)(need >> 16);
    out[*len + 2] = (uint8_t)(need >> 8);
    out[*len + 3] = (uint8_t)need;
    rpc_env_encode_request(out + *len + 4, id, service, method, body, blen);
    *len += 4 + need;
}

static size_t hello_frame(uint8_t *out, size_t cap, size_t *len, const uint8_t *tok, size_t n)
{
    AuthHelloRequest h = AUTH_HELLO_REQUEST__INIT;
    uint8_t body[600];
    h.token.data = (uint8_t *)tok;
    h.token.len = n;
    if (auth_hello_request__get_packed_size(&h) > sizeof(body)) return 0;
    size_t blen = auth_hello_request__pack(&h, body);
    frame(out, cap, len, 1, AUTH_SVC, HELLO, body, blen);
    return blen;
}

/* Write buf to fd, then read answers for up to 300 ms of silence; for each
 * decoded response call judge(request_id, status). */
static void exchange(int fd, const uint8_t *buf, size_t len, void (*judge)(uint64_t, int, void *),
                     void *arg)
{
    uint8_t in[65536];
    size_t have = 0;
    while (len > 0) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
        if (w <= 0) break;
        buf += w;
        len -= (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 300) <= 0) break;
        ssize_t r = recv(fd, in + have, sizeof(in) - have, 0);
        if (r <= 0) break;
        have += (size_t)r;
        while (have >= 4) {
            uint32_t n = (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 | (uint32_t)in[2] << 8 | in[3];
            rpc_env_response resp;
            if (n > sizeof(in) - 4) {
                have = 0;
                break;
            }
            if (have < 4 + (size_t)n) break;
            if (rpc_env_decode_response(in + 4, n, &resp) == 0 && judge != NULL)
                judge(resp.request_id, resp.status, arg);
            memmove(in, in + 4 + n, have - 4 - n);
            have -= 4 + (size_t)n;
        }
        if (have == sizeof(in)) have = 0;
    }
    close(fd);
}

typedef struct verdict {
    int role;          /* the caller's role: 0 none (missing or refused token) */
    uint32_t service;  /* of request 2 */
    uint32_t method;
} verdict;

static int rule_of(uint32_t service, uint32_t method)
{
    for (size_t i = 0; i < n_rules; i++)
        if (rules[i].service == service && rules[i].method == method) return rules[i].role;
    return -1; /* unknown route: answered NOT_FOUND */
}

/* Request 2 (the one after HELLO) may succeed only for a role at its rule. */
static void judge(uint64_t id, int status, void *arg)
{
    const verdict *v = arg;
    if (id != 2 || status != 0) return;
    int need = rule_of(v->service, v->method);
    if (need == 0) return; /* HELLO again: answered, but changes nothing */
    if (need < 0 || v->role < need) {
        char msg[160];
        snprintf(msg, sizeof(msg), "service %u method %u answered with success for role %d "
                 "(its rule needs %d)", v->service, v->method, v->role, need);
        die(msg);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t out[1 << 17];
    size_t len = 0;
    verdict v = {0, 0, 0};
    if (!started) start_master();
    if (size < 1) return 0;
    unsigned mode = data[0] % 4;
    data++, size--;
    int fd = fzm_connect(&master, "fuzz_auth");
    if (mode == 0) {
        exchange(fd, data, size < sizeof(out) ? size : sizeof(out), NULL, NULL);
    } else if (mode == 3) {
        hello_frame(out, sizeof(out), &len, (const uint8_t *)tokens[3], strlen(tokens[3]));
        size_t n = size < sizeof(out) - len ? size : sizeof(out) - len;
        memcpy(out + len, data, n);
        exchange(fd, out, len + n, NULL, NULL);
    } else {
        if (mode == 1) {
            size_t k = size > 0 ? data[0] : 0;
            if (size > 0) data++, size--;
            if (k > size) k = size;
            hello_frame(out, sizeof(out), &len, data, k);
            for (int i = 0; i < 4; i++) /* a real token by chance: judge it as such */
                if (strlen(tokens[i]) == k && memcmp(tokens[i], data, k) == 0) v.role = token_role[i];
            data += k, size -= k;
        } else {
            unsigned who = size > 0 ? data[0] % 4 : 0;
            if (size > 0) data++, size--;
            hello_frame(out, sizeof(out), &len, (const uint8_t *)tokens[who], strlen(tokens[who]));
            v.role = token_role[who];
        }
        /* the request: service selector (host 0..4 or the weight service), method, body */
        static const uint32_t services[] = {1, 2, 3, 4, 16, 0, 5, 17};
        v.service = size > 0 ? services[data[0] % 8] : 1;
        v.method = size > 1 ? data[1] % 24 : 8;
        const uint8_t *body = size > 2 ? data + 2 : NULL;
        size_t blen = size > 2 ? size - 2 : 0;
        if (blen > sizeof(out) / 2) blen = sizeof(out) / 2;
        frame(out, sizeof(out), &len, 2, v.service, v.method, body, blen);
        exchange(fd, out, len, judge, &v);
    }
    fzm_check_alive(&master, "fuzz_auth");
    if (++inputs % 64 == 0) fzm_check_serving(&master, "fuzz_auth");
    return 0;
}

int fuzz_seeds(const char *dir)
{
    int n = 0;
    uint8_t s[256];
    /* mode 2: each real token calling a list of each service (method 8 objects.list,
     * 7 weight.LIST), a status, an auth.RULES */
    static const uint8_t calls[][2] = {{0, 8}, {0, 4}, {1, 1}, {3, 2}, {4, 7}, {4, 4}, {2, 2}};
    for (int who = 0; who < 4; who++) {
        for (size_t c = 0; c < sizeof(calls) / sizeof(calls[0]); c++) {
            char name[32];
            s[0] = 2;
            s[1] = (uint8_t)who;
            s[2] = calls[c][0];
            s[3] = calls[c][1];
            snprintf(name, sizeof(name), "tok%d-call%zu", who, c);
            n += fuzz_seed(dir, name, s, 4) > 0;
        }
    }
    /* mode 1: a wrong token, then objects.list */
    s[0] = 1;
    s[1] = 5;
    memcpy(s + 2, "wrong", 5);
    s[7] = 0;
    s[8] = 8;
    n += fuzz_seed(dir, "wrong-token", s, 9) > 0;
    /* mode 0: a HELLO frame by hand, then a request, no token at all */
    {
        size_t len = 0;
        uint8_t out[256];
        out[0] = 0;
        len = 1;
        hello_frame(out, sizeof(out), &len, (const uint8_t *)"x", 1);
        frame(out, sizeof(out), &len, 2, 2, 1, NULL, 0);
        n += fuzz_seed(dir, "raw-hello-status", out, len) > 0;
    }
    return n;
}
