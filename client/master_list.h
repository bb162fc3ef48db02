/* master_list.h -- the masters a client or a node may talk to, and which one
 * to try next.
 *
 * An HA cluster has several masters and one leader. Clients and nodes are
 * given the masters as one comma-separated list ("a,b,c"; each item
 * "host:port", "[v6addr]:port", "unix:/path" or "/path"; a single endpoint
 * is a list of one) on --master, in $WEIGHTCTL_MASTER or in a config. This
 * module checks such a list and keeps the position in it: the endpoint in
 * use, the leader a standby named in its SMP_ENOTLEADER answer (it need not
 * be one of the list: a master advertises the endpoint it is reached at),
 * and the order in which the others are tried. It does no I/O; the
 * transport (rpc_client.c) decides when to move on. */
#ifndef WM_MASTER_LIST_H
#define WM_MASTER_LIST_H

#include <stddef.h>

#define ML_MAX_ENDPOINTS 16
#define ML_ENDPOINT_MAX 256 /* bytes of one endpoint, its NUL included */

typedef struct master_list {
    size_t n;                                  /* endpoints of the list, >= 1 */
    char ep[ML_MAX_ENDPOINTS][ML_ENDPOINT_MAX];
    char leader[ML_ENDPOINT_MAX];              /* "" or a named leader not in ep */
    size_t cur;                                /* in use: ep[cur], or leader when cur == n */
} master_list;

/* Parse spec into *out, positioned at its first endpoint. Items are
 * separated by ',' and may carry blanks around them. SMP_OK, or SMP_EINVAL
 * with err naming the list and the bad item: an empty item (",," or a
 * trailing ','), more than ML_MAX_ENDPOINTS items, an item of
 * ML_ENDPOINT_MAX bytes or more, a host:port without a host or whose port
 * is not a number in 1..65535, a Unix socket path too long for sun_path,
 * or the same endpoint twice. */
int master_list_parse(const char *spec, master_list *out, char *err, size_t errlen);

/* Check one endpoint as master_list_parse checks an item. SMP_OK or
 * SMP_EINVAL with err naming it. */
int master_list_check(const char *endpoint, char *err, size_t errlen);

/* The socket path of a Unix endpoint ("unix:/path" or "/path"), or NULL
 * for host:port. */
const char *master_list_unix_path(const char *endpoint);

/* The endpoint in use. */
const char *master_list_current(const master_list *ml);

/* How many endpoints one round tries: the list, and the named leader when
 * there is one. */
size_t master_list_round(const master_list *ml);

/* A standby named the leader (len bytes at leader, from the network; not
 * NUL-terminated): make it the endpoint in use. An endpoint of the list
 * is taken by its index; another one is kept as the named leader (at most
 * one: a newer name replaces it). An empty, malformed or oversized name
 * is no name: the hint is dropped and the position kept. Returns 1 when
 * the position now is the leader, 0 otherwise. */
int master_list_set_leader(master_list *ml, const char *leader, size_t len);

/* Move to the next endpoint. The order is a cycle: the list's endpoints in
 * turn, then the named leader when there is one, then the first again; so
 * master_list_round() moves visit each once. */
void master_list_next(master_list *ml);

#endif /* WM_MASTER_LIST_H */
