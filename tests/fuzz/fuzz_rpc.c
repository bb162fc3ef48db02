/* fuzz_rpc.c -- fuzz target: requests from the network to a real
 * store_master.
 *
 * One master (the real binary, with the weight plugin and its embedded node,
 * started through the test harness) serves the whole run; every input is one
 * connection. The first byte (modulo 3) says what the rest is:
 *   0  raw bytes written to the RPC socket as they are (frames, lengths and
 *      all);
 *   1  one RPC request: service selector, method, then the body, framed and
 *      wrapped in an RpcRequest here, so that mutants reach the handlers;
 *   2  raw bytes to the embedded node's data server (TCP, in the master's
 *      process): range reads and writes with their tickets, cold-file reads
 *      by name (node_data_wire.h).
 * The target reads whatever comes back until the master answers, closes or
 * 300 ms pass, then checks that the master process is still running; every
 * 64 inputs, and at exit, that it still answers a status request on a new
 * connection. A master that died or stopped answering aborts the run (with the
 * input in ./fuzz-crash-input; the master's stderr is in its log under the
 * harness directory, printed on failure). The state the inputs build up
 * (objects, groups, revisions) stays between inputs, as it would in a real
 * master under a hostile client.
 *
 * Coverage lives in the master process, so libFuzzer's guidance sees only
 * this side; the seeds (a valid request for every method of the objects,
 * admin, node and weight services, data-server requests) and the mutants do
 * the work, helped by the master's answers turned into features
 * (note_outcome). */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz.h"
#include "harness.h"
#include "host_rpc.pb-c.h"
#include "kv_client.h"
#include "master_fuzz.h"
#include "node_data_wire.h"
#include "node_rpc.pb-c.h"
#include "rpc.pb-c.h"
#include "weight_rpc.pb-c.h"

#define WEIGHT_SERVICE 16
#define NODE_SERVICE 3

static hx_master master;
static int started;
static unsigned long inputs;

static void die(const char *what)
{
    fzm_die(&master, "fuzz_rpc", what);
}

static void stop_master(void)
{
    if (!started) return;
    if (master.pid > 0) {
        fzm_check_serving(&master, "fuzz_rpc");
        hx_stop(&master);
    }
    hx_cleanup(&master);
}

static struct sockaddr_in data_addr; /* the embedded node's data server */

/* Learn where the embedded node's data server listens: the address a put
 * start hands out (the put is then revoked). */
static void find_data_server(void)
{
    kvc *c = hx_client(&master);
    kvc_replica where;
    char host[128];
    int port = 0;
    if (c == NULL || kvc_put_start(c, "fuzz/probe", 64, SMP_DATA_KV, NULL, 1, &where) < 0)
        die("cannot learn the node's data address");
    kvc_put_revoke(c, "fuzz/probe");
    kvc_close(c);
    if (sscanf(where.data_addr, "%127[^:]:%d", host, &port) != 2) die("odd data address");
    data_addr.sin_family = AF_INET;
    data_addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &data_addr.sin_addr) != 1) die("odd data address");
}

static void start_master(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (hx_init(&master, "fuzz-rpc", "snapshot:\n  every_records: 200\n") < 0 ||
        hx_start(&master, 20000) < 0)
        die("cannot start the master");
    started = 1;
    atexit(stop_master);
    find_data_server();
}

static int connect_data_server(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&data_addr, sizeof(data_addr)) < 0)
        die("cannot connect to the node's data server");
    return fd;
}

/* Send buf on fd (then closed), and read until the peer closes, answers (a
 * whole RPC frame when one_reply) or 300 ms pass without a byte. Returns the
 * status of the first response (an RPC frame or a data-server header), or
 * OUTCOME_NONE when none came whole. */
#define OUTCOME_NONE 1
static int exchange(int fd, const uint8_t *buf, size_t len, int one_reply)
{
    int outcome = OUTCOME_NONE;
    uint8_t in[65536];
    size_t have = 0;
    while (len > 0) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
        if (w <= 0) break; /* the master closed on us: fine */
        buf += w;
        len -= (size_t)w;
    }
    if (!one_reply) shutdown(fd, SHUT_WR);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 300) <= 0) break;
        if (have == sizeof(in)) have = 0; /* only the first frame matters */
        ssize_t r = recv(fd, in + have, sizeof(in) - have, 0);
        if (r <= 0) break;
        have += (size_t)r;
        if (outcome == OUTCOME_NONE && have >= NDW_RESP_HDR && memcmp(in, NDW_RESP_MAGIC, 4) == 0) {
            outcome = (int32_t)ndw_get_u32(in + 4); /* the data server's answer */
        } else if (outcome == OUTCOME_NONE && have >= 4) {
            uint32_t n = (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 | (uint32_t)in[2] << 8 | in[3];
            if (have >= 4 + (size_t)n) {
                RpcResponse *resp = rpc_response__unpack(NULL, n, in + 4);
                outcome = resp != NULL ? resp->status : OUTCOME_NONE;
                rpc_response__free_unpacked(resp, NULL);
                if (one_reply) break;
            }
        }
    }
    close(fd);
    return outcome;
}

/* The master runs in its own process, so libFuzzer sees only this side's
 * coverage; each (service, method, answer) seen is turned into a feature of
 * its own through libFuzzer's extra counters, so that inputs reaching a new
 * answer of the master are kept. Outside libFuzzer the section is plain
 * data. */
__attribute__((section("__libfuzzer_extra_counters"))) static uint8_t outcome_counters[10 * 32 * 16];

static void note_outcome(unsigned service_idx, uint32_t method, int status)
{
    /* 0 OK, 1..13 the error (host codes exactly, the plugin's folded), 15 no answer */
    unsigned st = status == OUTCOME_NONE ? 15 : status >= 0 ? 0 : 1 + (unsigned)(-(int64_t)status % 13);
    size_t at = ((size_t)service_idx * 32 + (method & 31)) * 16 + st;
    if (outcome_counters[at] < 255) outcome_counters[at]++;
}

static const uint32_t services[] = {1, 2, NODE_SERVICE, WEIGHT_SERVICE, 0, 4, 17, 255};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!started) start_master();
    if (size == 0) return 0;
    if (data[0] % 3 == 2) {
        note_outcome(9, size > 5 ? data[5] : 0, /* the op byte */
                     exchange(connect_data_server(), data + 1, size - 1, 0));
    } else if (data[0] % 3 == 0 || size < 3) {
        note_outcome(8, 0, exchange(fzm_connect(&master, "fuzz_rpc"), data + 1, size - 1, 0));
    } else {
        size_t n;
        unsigned idx = data[1] % (sizeof(services) / sizeof(services[0]));
        uint8_t *f = hx_frame_request(1, services[idx], data[2], data + 3, size - 3, &n);
        if (f == NULL) return 0;
        note_outcome(idx, data[2], exchange(fzm_connect(&master, "fuzz_rpc"), f, n, 1));
        free(f);
    }
    fzm_check_alive(&master, "fuzz_rpc");
    if (++inputs % 64 == 0) fzm_check_serving(&master, "fuzz_rpc");
    return 0;
}

/* -- seeds ------------------------------------------------------------------ */

/* One request seed: mode 1, the service's selector, the method, the body. */
static int seed_request(const char *dir, int *count, uint8_t selector, uint8_t method,
                        const ProtobufCMessage *msg)
{
    char name[64];
    size_t n = msg ? protobuf_c_message_get_packed_size(msg) : 0;
    uint8_t *buf = malloc(3 + n);
    int rc;
    if (buf == NULL) return -1;
    buf[0] = 1;
    buf[1] = selector;
    buf[2] = method;
    if (msg) protobuf_c_message_pack(msg, buf + 3);
    snprintf(name, sizeof(name), "req-%u-%u-%d", selector, method, *count);
    rc = fuzz_seed(dir, name, buf, 3 + n);
    free(buf);
    if (rc > 0) (*count)++;
    return rc;
}

static int seed_raw(const char *dir, int *count, const char *name, const uint8_t *p, size_t n)
{
    uint8_t *buf = malloc(n + 1);
    int rc;
    if (buf == NULL) return -1;
    buf[0] = 0;
    memcpy(buf + 1, p, n);
    rc = fuzz_seed(dir, name, buf, n + 1);
    free(buf);
    if (rc > 0) (*count)++;
    return rc;
}

/* Seeds for the objects (selector 0), admin (1) and node (2) services. */
static int host_seeds(const char *dir, int *n)
{
    PutStartRequest ps = PUT_START_REQUEST__INIT;
    PutEndRequest pe = PUT_END_REQUEST__INIT;
    KeyRequest key = KEY_REQUEST__INIT;
    RemovePrefixRequest rp = REMOVE_PREFIX_REQUEST__INIT;
    ListRequest ls = LIST_REQUEST__INIT;
    GroupSetManagedRequest gm = GROUP_SET_MANAGED_REQUEST__INIT;
    StatusRequest st = STATUS_REQUEST__INIT;
    NodePollRequest poll_req = NODE_POLL_REQUEST__INIT;
    uint8_t sha[32];
    memset(sha, 0xab, sizeof(sha));
    ps.key = "fuzz/a";
    ps.size = 64;
    pe.key = "fuzz/a";
    pe.sha256.data = sha;
    pe.sha256.len = sizeof(sha);
    key.key = "fuzz/a";
    rp.prefix = "fuzz/";
    ls.prefix = "fuzz/";
    ls.limit = 10;
    gm.group = "fuzz-group";
    gm.managed = 1;
    poll_req.node_id = "no-such-node";
    if (seed_request(dir, n, 0, OBJECTS_METHOD__OBJ_PUT_START, &ps.base) < 0 ||
        seed_request(dir, n, 0, OBJECTS_METHOD__OBJ_PUT_END, &pe.base) < 0 ||
        seed_request(dir, n, 0, OBJECTS_METHOD__OBJ_PUT_REVOKE, &key.base) < 0 ||
        seed_request(dir, n, 0, OBJECTS_METHOD__OBJ_GET_REPLICAS, &key.base) < 0 ||
        seed_request(dir, n, 0, OBJECTS_METHOD__OBJ_EXISTS, &key.base) < 0 ||
        seed_request(dir, n, 0, OBJECTS_METHOD__OBJ_REMOVE, &key.base) < 0 ||
        seed_request(dir, n, 0, OBJECTS_METHOD__OBJ_REMOVE_PREFIX, &rp.base) < 0 ||
        seed_request(dir, n, 0, OBJECTS_METHOD__OBJ_LIST, &ls.base) < 0 ||
        seed_request(dir, n, 0, OBJECTS_METHOD__OBJ_GROUP_SET_MANAGED, &gm.base) < 0 ||
        seed_request(dir, n, 1, ADMIN_METHOD__ADMIN_STATUS, &st.base) < 0 ||
        seed_request(dir, n, 1, ADMIN_METHOD__ADMIN_SNAPSHOT, &st.base) < 0 ||
        seed_request(dir, n, 2, NODE_METHOD__NODE_POLL, &poll_req.base) < 0)
        return -1;
    return 0;
}

/* Seeds for the weight plugin's service (selector 3). */
static int weight_seeds(const char *dir, int *n)
{
    Wmrpc__WeightIdentity id = WMRPC__WEIGHT_IDENTITY__INIT;
    Wmrpc__WeightPolicy pol = WMRPC__WEIGHT_POLICY__INIT;
    Wmrpc__ImportBeginRequest ib = WMRPC__IMPORT_BEGIN_REQUEST__INIT;
    Wmrpc__IdentityRequest ir = WMRPC__IDENTITY_REQUEST__INIT;
    Wmrpc__ListRequest wl = WMRPC__LIST_REQUEST__INIT;
    Wmrpc__LeaseRequest lr = WMRPC__LEASE_REQUEST__INIT;
    Wmrpc__MigrateRequest mr = WMRPC__MIGRATE_REQUEST__INIT;
    Wmrpc__UpdatePolicyRequest up = WMRPC__UPDATE_POLICY_REQUEST__INIT;
    Wmrpc__OperationRequest op = WMRPC__OPERATION_REQUEST__INIT;
    id.tenant = "default";
    id.namespace_id = "fuzz";
    id.resource_id = "model";
    id.revision = "r1";
    id.generation = 1;
    pol.preferred_residency = 1;
    pol.migration_mode = 3;
    ib.identity = &id;
    ib.policy = &pol;
    ir.identity = &id;
    wl.namespace_id = "fuzz";
    wl.limit = 5;
    lr.identity = &id;
    mr.identity = &id;
    mr.target_residency = 3;
    mr.mixed_hot_ratio = 0.5;
    up.identity = &id;
    up.policy = &pol;
    op.operation_id = 1;
    if (seed_request(dir, n, 3, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_BEGIN, &ib.base) < 0 ||
        seed_request(dir, n, 3, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, &ir.base) < 0 ||
        seed_request(dir, n, 3, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &ir.base) < 0 ||
        seed_request(dir, n, 3, WMRPC__WEIGHT_METHOD__WEIGHT_IS_EXIST, &ir.base) < 0 ||
        seed_request(dir, n, 3, WMRPC__WEIGHT_METHOD__WEIGHT_GET_SIZE, &ir.base) < 0 ||
        seed_request(dir, n, 3, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &wl.base) < 0 ||
        seed_request(dir, n, 3, WMRPC__WEIGHT_METHOD__WEIGHT_UPDATE_POLICY, &up.base) < 0 ||
        seed_request(dir, n, 3, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &lr.base) < 0 ||
        seed_request(dir, n, 3, WMRPC__WEIGHT_METHOD__WEIGHT_MIGRATE, &mr.base) < 0 ||
        seed_request(dir, n, 3, WMRPC__WEIGHT_METHOD__WEIGHT_GET_OPERATION, &op.base) < 0 ||
        seed_request(dir, n, 3, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &ir.base) < 0)
        return -1;
    return 0;
}

/* A data-server request (mode 2): header, segment id or cold name, ticket. */
static int seed_data(const char *dir, int *count, const char *name, uint8_t op, const char *seg,
                     uint64_t offset, uint64_t length, const char *ticket)
{
    uint8_t buf[1 + NDW_REQ_HDR + 512];
    ndw_request r = {op, (uint16_t)strlen(seg), offset, length, (uint32_t)strlen(ticket)};
    buf[0] = 2;
    ndw_encode_request(buf + 1, &r);
    memcpy(buf + 1 + NDW_REQ_HDR, seg, r.seg_len);
    memcpy(buf + 1 + NDW_REQ_HDR + r.seg_len, ticket, r.ticket_len);
    int rc = fuzz_seed(dir, name, buf, 1 + NDW_REQ_HDR + r.seg_len + r.ticket_len);
    if (rc > 0) (*count)++;
    return rc;
}

static int data_seeds(const char *dir, int *n)
{
    static const char cold[] =
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.cold";
    if (seed_data(dir, n, "data-read", NDW_OP_READ, "embedded", 0, 64, "") < 0 ||
        seed_data(dir, n, "data-write", NDW_OP_WRITE, "embedded", 4096, 64, "not-a-ticket") < 0 ||
        seed_data(dir, n, "data-read-cold", NDW_OP_READ_COLD, cold, 0, 16, "") < 0 ||
        seed_data(dir, n, "data-read-cold-escape", NDW_OP_READ_COLD, "../../etc/passwd", 0, 16,
                  "") < 0 ||
        seed_data(dir, n, "data-check-cold", NDW_OP_CHECK_COLD, cold, 0, 0, "not-a-ticket") < 0 ||
        seed_data(dir, n, "data-read-huge", NDW_OP_READ, "embedded", UINT64_MAX - 8, 64, "") < 0)
        return -1;
    return 0;
}

int fuzz_seeds(const char *dir)
{
    int n = 0;
    size_t len;
    KeyRequest key = KEY_REQUEST__INIT;
    uint8_t body[64];
    key.key = "fuzz/a";
    size_t blen = key_request__pack(&key, body);
    uint8_t *one = hx_frame_request(1, 1, OBJECTS_METHOD__OBJ_EXISTS, body, blen, &len);
    uint8_t two[512];
    int rc = one != NULL && 2 * len <= sizeof(two) ? 0 : -1;
    if (rc == 0) {
        /* two pipelined frames, and one cut short */
        memcpy(two, one, len);
        memcpy(two + len, one, len);
        rc = seed_raw(dir, &n, "raw-pipelined", two, 2 * len) < 0 ||
                     seed_raw(dir, &n, "raw-truncated", one, len - 2) < 0
                 ? -1
                 : 0;
    }
    free(one);
    if (rc < 0 || host_seeds(dir, &n) < 0 || weight_seeds(dir, &n) < 0 || data_seeds(dir, &n) < 0)
        return -1;
    return n;
}
