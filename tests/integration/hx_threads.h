/* hx_threads.h -- one thread of a real process stopped on demand.
 *
 * A test that needs a slow disk, a stuck read or a task that takes longer
 * than a timeout stops the one thread of the master or the node that runs
 * it, with ptrace, and lets it go when the test has seen what happens
 * meanwhile. The rest of the process runs on: its control thread, its
 * sockets, its timers. Nothing of the program under test is changed. */
#ifndef HX_THREADS_H
#define HX_THREADS_H

#include <sys/types.h>

/* The thread of process pid whose name (/proc/.../comm, set with
 * PR_SET_NAME) is name, or -1. */
pid_t hx_thread_named(pid_t pid, const char *name);

/* Attach to thread tid of another process (that thread only) and stop it.
 * 0 with the thread stopped, or -1 (errno set). Let it go with
 * hx_thread_release. */
int hx_thread_stop(pid_t tid);

/* Let thread tid, stopped by hx_thread_stop, run until it enters an
 * openat (or open) of a path whose last component is name, and stop it
 * there: the file is not opened yet, and nothing after it has run. Signals
 * the thread gets meanwhile are passed on. 0, or -1 when it did not within
 * timeout_ms (it is stopped again then) or could not be traced. */
int hx_thread_stop_at_open(pid_t tid, const char *name, int timeout_ms);

/* Detach from thread tid: it runs on from where it stopped (a syscall it
 * stopped at the entry of is made). 0 or -1. */
int hx_thread_release(pid_t tid);

#endif /* HX_THREADS_H */
