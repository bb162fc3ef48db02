/* fault_proxy.h -- a loopback TCP relay whose connections a test can cut,
 * slow down or tamper with.
 *
 * A fault injector, not a stand-in: it relays bytes between one client and
 * a real server (etcd, a node's data port), and on fault_proxy_cut drops
 * every relayed connection and refuses new ones until restored -- the
 * network partition of one process from a server, which the real network
 * cannot produce on demand without privileges. fault_proxy_throttle makes
 * it a slow link; a filter may change what a client sends (a forged
 * request in flight). */
#ifndef TEST_FAULT_PROXY_H
#define TEST_FAULT_PROXY_H

#include <stddef.h>

typedef struct fault_proxy fault_proxy;

/* Listen on a free 127.0.0.1 port relaying to upstream ("host:port");
 * *listen_out gets "127.0.0.1:<port>". 0, or -1. */
int fault_proxy_start(const char *upstream, fault_proxy **out, char *listen_out, size_t cap);

/* The same on a free port of listen_host (a numeric IPv4 address, e.g.
 * "127.0.0.2": another loopback address). An upstream port 0 is the port
 * the proxy got: a server then listens on it at its own address (a node
 * advertising only its host, listen_host, keeps its data port). */
int fault_proxy_start_at(const char *listen_host, const char *upstream, fault_proxy **out,
                         char *listen_out, size_t cap);

/* A slow link: relay at most bytes_per_s bytes a second, both directions
 * and all connections together (0: as fast as they come). */
void fault_proxy_throttle(fault_proxy *p, unsigned long bytes_per_s);

/* Called on the relay thread with each piece of bytes a client sends, before
 * it goes upstream: conn numbers the relayed connections from 1 in the order
 * they were accepted, at is the offset of buf in that connection's stream;
 * fn may change buf's n bytes in place (tampering in flight). NULL: none. */
typedef void (*fault_proxy_filter)(void *ctx, unsigned conn, unsigned long long at,
                                   unsigned char *buf, size_t n);
void fault_proxy_set_filter(fault_proxy *p, fault_proxy_filter fn, void *ctx);

/* cut 1: close every relayed connection and close new ones at once; 0:
 * relay again. Returns once the relay's thread has done so: a process the
 * test starts next cannot be reached through a connection the cut was to
 * close. */
void fault_proxy_cut(fault_proxy *p, int cut);

/* Stop the relay thread and close everything. NULL is a no-op. */
void fault_proxy_stop(fault_proxy *p);

#endif
