/* seg_local.h -- a client asks a dedicated node for its segment.
 *
 * The client half of host_shim/node/node_local.h: connect to the node's
 * local socket (the master names it in a replica location when the node is
 * dedicated to the object's tenant), receive the node's answer and, when
 * the node found this process's uid or gid among its tenant's local peers,
 * the segment file's descriptor (SCM_RIGHTS). The caller maps it
 * (seg_map_open_at) and copies through the mapping as from a path.
 *
 * A refusal is remembered per socket file for the process's life (until the
 * node restarts and the socket is a new file): asking again would only be
 * refused again. The first refusal of each socket is logged on stderr, once
 * -- "libweightclient: node N refused this process its segment ... reading
 * through its data port" -- and every read and write of that node then goes
 * through the data port with the master's tickets. A node that lets the
 * connect or its answer time out is not asked again for 30 s (or until it
 * restarts on a new socket file): the data port serves meanwhile, instead
 * of every mapping waiting 5 s more. Thread-safe. */
#ifndef WM_SEG_LOCAL_H
#define WM_SEG_LOCAL_H

#include <stddef.h>
#include <sys/stat.h>

#include "store_plugin.h"

/* The node's answer: one message, this status byte then text (the segment
 * id, or the cause of a refusal); a grant carries the descriptor. */
#define NODE_LOCAL_GRANTED 'G'
#define NODE_LOCAL_REFUSED 'R'

/* Ask the node listening on socket_path for its segment. On success *fd is
 * a descriptor of the segment file (read-write, close-on-exec; the caller
 * owns it) and *sock the stat of the socket file it came from (a restarted
 * node listens on a new one). SMP_EFORBIDDEN: the node refused this
 * process (err is the node's cause; logged once per socket); SMP_ENOTFOUND:
 * nothing listens there; SMP_EPROTO: an answer that is not the node's;
 * SMP_EIO (also a node that accepts no connection within 5 s, "connect
 * timed out", or does not answer within 5 s; and, for 30 s after such a
 * time-out of the same socket file, at once: "not asked again"). */
int seg_local_fetch(const char *socket_path, int *fd, struct stat *sock, char *err, size_t errlen);

#endif /* WM_SEG_LOCAL_H */
