/* ha_exit_watch.h -- noticing at once that the leader's process is gone.
 *
 * A leader that crashes or is SIGKILLed keeps its leader key until its etcd
 * lease expires: up to the whole TTL, plus etcd's own expiry tick. But the
 * kernel of the leader's machine closes every socket of a process that dies,
 * so a standby holding an idle connection to the leader's endpoint reads
 * end-of-file the moment the process is gone, and can revoke the dead
 * leader's lease straight away (which deletes the leader key and lets the
 * next candidate win).
 *
 * Acting on a false end-of-file is safe, only wasteful: revoking a live
 * leader's lease deposes it (its renewals fail and its fenced OpLog writes
 * are refused), and the cluster elects again. So the watcher is careful only
 * about what it can get wrong cheaply: a connection on which the leader sent
 * anything (the RPC server refusing a connection past max_connections says
 * why before closing) is not a death, nor is a connection that never opened.
 * A leader that hangs (SIGSTOP, a frozen machine) keeps its sockets open and
 * is deposed by its lease as before.
 *
 * The watcher runs its own thread; the callback runs on it. */
#ifndef HOST_HA_EXIT_WATCH_H
#define HOST_HA_EXIT_WATCH_H

#include <stdint.h>

typedef struct ha_exit_watch ha_exit_watch;

/* The process behind endpoint (which held lease) closed its connection.
 * Called once per watched (endpoint, lease), on the watcher's thread. */
typedef void (*ha_exit_fn)(void *arg, const char *endpoint, int64_t lease);

/* Start the watcher thread. Returns 0, SMP_ENOMEM or SMP_EIO (no thread or
 * no wake-up descriptor). */
int ha_exit_watch_start(ha_exit_fn on_exit, void *arg, ha_exit_watch **out);

/* Watch the leader at endpoint ("host:port", "unix:/path" or "/path")
 * holding lease; an
 * empty endpoint or lease 0 stops watching. Setting the pair being watched
 * again changes nothing. Any thread. */
void ha_exit_watch_set(ha_exit_watch *w, const char *endpoint, int64_t lease);

/* Stop and join the thread, close the connection, free w. NULL is a no-op. */
void ha_exit_watch_stop(ha_exit_watch *w);

#endif
