/* net_addr.h -- the one parser of listen addresses.
 *
 * Every TCP endpoint the master and its nodes listen on (RPC, node data,
 * admin HTTP) is written "host:port", "[v6]:port" or ":port" in the config
 * and on command lines. The host is a numeric address, "localhost" or
 * "*"/"" (any IPv4 address); names are not resolved. */
#ifndef HOST_NET_ADDR_H
#define HOST_NET_ADDR_H

#include <sys/socket.h>

/* Parse spec into ss (AF_INET or AF_INET6). SMP_OK or SMP_EINVAL. */
int net_parse_listen(const char *spec, struct sockaddr_storage *ss);

/* 1 when spec binds only a loopback address (127.0.0.0/8 or ::1), or is ""
 * (the endpoint is off); 0 for any other address, and for a spec that does
 * not parse (so a caller deciding whether to relax a rule fails closed). */
int net_listen_is_loopback(const char *spec);

#endif /* HOST_NET_ADDR_H */
