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

#endif /* HOST_NET_ADDR_H */
