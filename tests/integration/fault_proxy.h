/* fault_proxy.h -- a loopback TCP relay whose connections a test can cut.
 *
 * A fault injector, not a stand-in: it relays bytes unchanged between one
 * client and a real server (etcd, say), and on fault_proxy_cut drops every
 * relayed connection and refuses new ones until restored -- the network
 * partition of one process from a server, which the real network cannot
 * produce on demand without privileges. */
#ifndef TEST_FAULT_PROXY_H
#define TEST_FAULT_PROXY_H

#include <stddef.h>

typedef struct fault_proxy fault_proxy;

/* Listen on a free 127.0.0.1 port relaying to upstream ("host:port");
 * *listen_out gets "127.0.0.1:<port>". 0, or -1. */
int fault_proxy_start(const char *upstream, fault_proxy **out, char *listen_out, size_t cap);

/* cut 1: close every relayed connection and close new ones at once; 0:
 * relay again. */
void fault_proxy_cut(fault_proxy *p, int cut);

/* Stop the relay thread and close everything. NULL is a no-op. */
void fault_proxy_stop(fault_proxy *p);

#endif
