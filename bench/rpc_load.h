/* rpc_load.h -- one load generator for the master's identity reads and for
 * Redis GETs: every connection served by one thread with epoll, one request
 * in flight on each (no pipelining), each reply parsed and checked before
 * the connection's next request goes out -- redis-benchmark's client model.
 *
 * The same code drives both servers, so the ratio compares the servers and
 * not two load generators (at 50 clients on two cores redis-benchmark is the
 * bound of Redis's figure: the same redis-server answers about twice as
 * many GETs from this driver). libweightclient's blocking calls, one thread
 * per client, are the other model (what a program of threads gets): there
 * every reply wakes its own thread. bench_metadata_reads prints both. */
#ifndef BENCH_RPC_LOAD_H
#define BENCH_RPC_LOAD_H

#include <stddef.h>
#include <stdint.h>

typedef struct rpc_load_opts {
    const char *socket; /* the server's Unix socket path */
    int conns;          /* connections, 1..1024 */
    double seconds;     /* how long requests are sent */
    /* WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA or _IS_EXIST to a master,
     * on identities default/bench/model-%07ld (0..n-1)/r1, generation 1;
     * RPC_LOAD_OBJ_EXISTS: the host's object lookup (objects service,
     * OBJ_EXISTS) of those revisions' manifest keys, each answered true;
     * RPC_LOAD_REDIS_GET: GET key:N (0..n-1) of redis_populate's keys, each
     * answered with its value. */
    uint32_t method;
    long n;             /* the identities' or keys' count */
} rpc_load_opts;

#define RPC_LOAD_REDIS_GET 0xFFFFFFFFu
#define RPC_LOAD_OBJ_EXISTS 0xFFFFFFFEu

/* What a run did: the replies checked in `seconds` from the first request
 * out, and the CPU seconds this thread spent meanwhile (sending, waiting,
 * parsing). */
typedef struct rpc_load_result {
    long replies;
    double seconds;
    double cpu_s;
} rpc_load_result;

/* Run o's load until o->seconds have passed, into *out. Every reply must
 * be status OK with the revision's metadata (or exists true), or the key's
 * value: anything else stops the run. 0, or -1 with the cause in err. */
int rpc_load_run(const rpc_load_opts *o, rpc_load_result *out, char *err, size_t errlen);

#endif
