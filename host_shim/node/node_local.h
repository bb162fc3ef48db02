/* node_local.h -- a dedicated node hands its segment to its tenant's
 * co-located processes over a Unix socket.
 *
 * A node dedicated to a tenant (store_node --tenant) holds only that
 * tenant's bytes: the master places no other tenant's objects on it. Its
 * segment file stays 0600 in a 0700 directory, so no other user can open
 * it by path; instead the node listens on a Unix socket (--local-socket,
 * mode 0666: anyone may ask) and, for each connection, reads the peer's
 * credentials from the kernel (SO_PEERCRED: the uid and gid the peer had
 * when it connected, which it cannot forge; SO_PEERGROUPS: its
 * supplementary groups then) and checks them against its
 * list of local peers (--local-peer uid:N / gid:N). A listed peer receives
 * a descriptor of the segment file (SCM_RIGHTS; a new open file description
 * without the node's lock, read-write) and maps it itself: the zero-copy
 * path of a co-located client, with no copy through the node. Anyone else
 * receives a refusal that names its uid and gid, the node logs it, and the
 * client reads through the data port with the master's tickets.
 *
 * The answer is one message: a status byte (NODE_LOCAL_GRANTED, with the
 * descriptor attached, or NODE_LOCAL_REFUSED) followed by text (the
 * segment's id, or the cause of the refusal). The node closes the
 * connection after it. A granted peer may read and write every byte of the
 * segment -- all its own tenant's -- exactly as the node's own user could
 * before; the master still decides which range belongs to which object.
 *
 * One thread serves the socket; it only reads the segment's path and
 * identity (fixed for the node's life). */
#ifndef HOST_NODE_LOCAL_H
#define HOST_NODE_LOCAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "node_segment.h"
#include "seg_local.h" /* the answer's status bytes */
#define NODE_LOCAL_PEERS_MAX 64

typedef struct node_local node_local;

/* Who may receive the segment: a peer whose uid is in uids or whose
 * primary gid or one of whose supplementary groups is in gids. */
typedef struct node_local_peers {
    uid_t uids[NODE_LOCAL_PEERS_MAX];
    size_t n_uids;
    gid_t gids[NODE_LOCAL_PEERS_MAX];
    size_t n_gids;
} node_local_peers;

/* Add one --local-peer spec, "uid:N" or "gid:N" (N a decimal id below
 * 2^32 - 1), to p. SMP_OK, or SMP_EINVAL (not of that form), SMP_ERANGE
 * (more than NODE_LOCAL_PEERS_MAX of a kind), with err naming the spec. */
int node_local_add_peer(node_local_peers *p, const char *spec, char *err, size_t errlen);

/* 1 when a peer with uid, primary gid and supplementary groups (n_groups
 * of them; may be NULL when 0) is in p -- its uid listed, or its primary
 * gid or one of its groups listed -- else 0. */
int node_local_peer_allowed(const node_local_peers *p, uid_t uid, gid_t gid, const gid_t *groups,
                            size_t n_groups);

/* Listen on socket_path for node_id's segment seg (borrowed; it must
 * outlive the server) on behalf of tenant, and start the serving thread.
 * A stale socket file (nobody listening) is replaced; a path where another
 * node listens is SMP_EBUSY, a path that exists and is no socket SMP_EEXIST,
 * a path too long for a socket address SMP_EINVAL; SMP_EIO when socket,
 * bind, listen or the thread failed. err names the path and the cause;
 * nothing keeps running on failure. */
int node_local_start(const char *socket_path,
                     const char *node_id,
                     const char *tenant,
                     const node_local_peers *peers,  /* copied */
                     seg_segment *seg,
                     node_local **out,
                     char *err,
                     size_t errlen);

/* Stop the thread, close the socket and unlink its file. NULL is a no-op. */
void node_local_stop(node_local *l);

#endif /* HOST_NODE_LOCAL_H */
