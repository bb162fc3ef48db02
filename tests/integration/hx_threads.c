/* hx_threads.c -- one thread of a real process stopped on demand (see
 * hx_threads.h), with ptrace: PTRACE_SEIZE of that thread alone, and
 * syscall stops read with PTRACE_GET_SYSCALL_INFO (Linux 5.3). */
#include "hx_threads.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

pid_t hx_thread_named(pid_t pid, const char *name)
{
    char path[320], comm[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *e;
    pid_t found = -1;
    while (d != NULL && found < 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid, e->d_name);
        FILE *fp = fopen(path, "r");
        if (fp == NULL) continue;
        if (fgets(comm, sizeof(comm), fp) != NULL) {
            comm[strcspn(comm, "\n")] = '\0';
            if (strcmp(comm, name) == 0) found = (pid_t)atoi(e->d_name);
        }
        fclose(fp);
    }
    if (d != NULL) closedir(d);
    return found;
}

int hx_thread_stop(pid_t tid)
{
    int st;
    if (ptrace(PTRACE_SEIZE, tid, NULL, (void *)(long)PTRACE_O_TRACESYSGOOD) < 0) return -1;
    if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) == 0 && waitpid(tid, &st, __WALL) == tid &&
        WIFSTOPPED(st))
        return 0;
    int saved = errno;
    ptrace(PTRACE_DETACH, tid, NULL, NULL);
    errno = saved;
    return -1;
}

int hx_thread_release(pid_t tid)
{
    return ptrace(PTRACE_DETACH, tid, NULL, NULL) == 0 ? 0 : -1;
}

/* The string at addr in tid's memory (at most cap - 1 bytes) into out. */
static int read_string(pid_t tid, uint64_t addr, char *out, size_t cap)
{
    size_t got = 0;
    while (got + 1 < cap) {
        /* a page at a time: the string may end just before an unmapped one */
        size_t step = 4096 - (size_t)((addr + got) % 4096);
        if (step > cap - 1 - got) step = cap - 1 - got;
        struct iovec local = {out + got, step};
        struct iovec remote = {(void *)(uintptr_t)(addr + got), step};
        ssize_t n = process_vm_readv(tid, &local, 1, &remote, 1, 0);
        if (n <= 0) return -1;
        if (memchr(out + got, '\0', (size_t)n) != NULL) return 0;
        got += (size_t)n;
    }
    out[got] = '\0';
    return 0;
}

/* Is the syscall tid entered (info) an open of a path ending in name? */
static int opens(pid_t tid, const struct __ptrace_syscall_info *info, const char *name)
{
    uint64_t path_arg;
    char path[4096];
    if (info->op != PTRACE_SYSCALL_INFO_ENTRY) return 0;
    if (info->entry.nr == SYS_openat)
        path_arg = info->entry.args[1];
#ifdef SYS_open
    else if (info->entry.nr == SYS_open)
        path_arg = info->entry.args[0];
#endif
    else
        return 0;
    if (read_string(tid, path_arg, path, sizeof(path)) < 0) return 0;
    const char *base = strrchr(path, '/');
    return strcmp(base != NULL ? base + 1 : path, name) == 0;
}

int hx_thread_stop_at_open(pid_t tid, const char *name, int timeout_ms)
{
    long long end = hx_now_ms() + timeout_ms;
    int sig = 0, st;
    for (;;) {
        if (ptrace(PTRACE_SYSCALL, tid, NULL, (void *)(long)sig) < 0) return -1;
        sig = 0;
        pid_t w;
        while ((w = waitpid(tid, &st, __WALL | WNOHANG)) == 0 && hx_now_ms() < end) {
            struct timespec ms = {0, 1000000L};
            nanosleep(&ms, NULL);
        }
        if (w == 0) { /* timed out: stopped again, as it was given */
            if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) == 0) waitpid(tid, &st, __WALL);
            return -1;
        }
        if (w != tid || !WIFSTOPPED(st)) return -1;
        if (WSTOPSIG(st) == (SIGTRAP | 0x80)) {
            struct __ptrace_syscall_info info;
            memset(&info, 0, sizeof(info));
            if (ptrace(PTRACE_GET_SYSCALL_INFO, tid, (void *)sizeof(info), &info) <= 0) return -1;
            if (opens(tid, &info, name)) return 0;
        } else if (st >> 16 != PTRACE_EVENT_STOP) {
            sig = WSTOPSIG(st); /* a signal for the thread: delivered as it goes on */
        }
    }
}
