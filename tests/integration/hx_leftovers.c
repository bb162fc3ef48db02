/* hx_leftovers.c -- the directories a test process left behind when it died
 * without its cleanup, found and removed by the next test process.
 *
 * A test removes what it made in its teardown, and cmocka runs the teardown
 * after a failed assertion or a caught crash. A process killed by a signal
 * it cannot catch -- ctest's timeout sends SIGKILL -- runs nothing: its
 * masters die with it (PR_SET_PDEATHSIG), but its directory under /tmp, its
 * segment files and its cold directories in /dev/shm stay.
 *
 * So every directory the harness makes for a test (hx_init's, the etcd
 * fixture's, a test's own in /dev/shm through hx_own_dir) holds an owner
 * file naming its process: the pid and the process's start time, since a
 * pid alone is reused. The first hx_init of a process goes through the
 * wm-* entries of TMPDIR (/tmp) and /dev/shm and removes each whose owner is
 * gone. A directory without an owner file is never touched: one being made
 * (the file is written after the directory, renamed into place whole), a
 * benchmark's kept data (hx_disown_dir), anything not the harness's. */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define HX_OWNER ".owner"

/* The start time of process pid (clock ticks after boot, field 22 of
 * /proc/PID/stat) into *out. 0, or -1 when there is no such process. */
static int hx_proc_start(long pid, unsigned long long *out)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command may hold spaces and ')' */
    if (p == NULL) return -1;
    /* fields 3 (state) to 21 skipped, then 22 */
    return sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                  out) == 1
               ? 0
               : -1;
}

int hx_own_dir(const char *dir)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    unsigned long long start;
    if (hx_proc_start((long)getpid(), &start) < 0) return -1;
    if (snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, HX_OWNER) >= (int)sizeof(tmp) ||
        snprintf(path, sizeof(path), "%s/%s", dir, HX_OWNER) >= (int)sizeof(path))
        return -1;
    FILE *f = fopen(tmp, "w");
    if (f == NULL) return -1;
    int ok = fprintf(f, "%ld %llu\n", (long)getpid(), start) > 0;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int hx_own_new_dir(const char *dir)
{
    if (mkdir(dir, 0700) < 0) return -1;
    if (hx_own_dir(dir) < 0) {
        int e = errno ? errno : EIO;
        rmdir(dir);
        errno = e;
        return -1;
    }
    return 0;
}

void hx_disown_dir(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/%s", dir, HX_OWNER) < (int)sizeof(path)) unlink(path);
}

static int hx_remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* 1 when the owner file of dir names a process that is gone (no such pid,
 * or the pid of a process started since); 0 when it is alive, or dir has
 * no owner file. */
static int hx_owner_gone(const char *dir)
{
    char path[PATH_MAX];
    long pid = 0;
    unsigned long long start = 0, now;
    if (snprintf(path, sizeof(path), "%s/%s", dir, HX_OWNER) >= (int)sizeof(path)) return 0;
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    int ok = fscanf(f, "%ld %llu", &pid, &start) == 2 && pid > 0;
    fclose(f);
    if (!ok) return 0;
    return hx_proc_start(pid, &now) < 0 || now != start;
}

/* Remove every wm-* directory of parent whose owner is gone. */
static void hx_sweep_in(const char *parent)
{
    DIR *d = opendir(parent);
    if (d == NULL) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[PATH_MAX];
        if (strncmp(e->d_name, "wm-", 3) != 0 ||
            snprintf(path, sizeof(path), "%s/%s", parent, e->d_name) >= (int)sizeof(path) ||
            !hx_owner_gone(path))
            continue;
        /* Depth first, symlinks removed and never followed (a test's
         * directory links its cold directories in /dev/shm). */
        if (nftw(path, hx_remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0)
            fprintf(stderr, "harness: removed %s, left by a test process that is gone\n", path);
        else
            fprintf(stderr, "harness: could not remove %s (left by a test process that is gone): %s\n",
                    path, strerror(errno));
    }
    closedir(d);
}

void hx_sweep_leftovers(void)
{
    static int swept;
    if (swept) return;
    swept = 1;
    const char *tmp = getenv("TMPDIR");
    hx_sweep_in(tmp && tmp[0] ? tmp : "/tmp");
    hx_sweep_in("/dev/shm");
}
