/* redis_box.c -- a redis-server of a benchmark's own and redis-benchmark
 * against it (redis_box.h). */
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_box.h"

/* Run argv to its end with its standard output into out (cap bytes, NUL
 * terminated); stderr is discarded. Returns the exit status or -1. */
int bench_run_capture(char *const argv[], char *out, size_t cap)
{
    int pfd[2];
    size_t n = 0;
    ssize_t r;
    int status;
    if (pipe(pfd) < 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(pfd[1], 1);
        if (devnull >= 0) dup2(devnull, 2);
        close(pfd[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    while (n + 1 < cap && (r = read(pfd[0], out + n, cap - 1 - n)) > 0) n += (size_t)r;
    out[n] = '\0';
    close(pfd[0]);
    if (waitpid(pid, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}


int redis_start(redis_box *r, const char *parent, int durable)
{
    struct stat st;
    snprintf(r->dir, sizeof(r->dir), "%s/redis-XXXXXX", parent);
    if (mkdtemp(r->dir) == NULL) {
        r->dir[0] = '\0';
        return -1;
    }
    snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
    r->pid = fork();
    if (r->pid < 0) return -1;
    if (r->pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", r->sock, "--dir",
               r->dir, "--appendonly", durable ? "yes" : "no", "--appendfsync", "always",
               "--save", "", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        if (stat(r->sock, &st) == 0) return 0;
        if (waitpid(r->pid, NULL, WNOHANG) == r->pid) return -1;
        usleep(25000);
    }
    return -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Stop the server (SIGTERM: it syncs and exits) and remove its directory. */
void redis_stop(redis_box *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGTERM);
        waitpid(r->pid, NULL, 0);
    }
    if (r->dir[0] && nftw(r->dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "bench: could not remove %s\n", r->dir);
}

double redis_bench(const redis_box *r, const char *test, int clients, long requests)
{
    char c[16], n[32], out[4096], want[32];
    char *argv[] = {"redis-benchmark", "-s", (char *)r->sock, "-t", (char *)test, "-c", c, "-n", n,
                    "-r", "100000000", "--csv", NULL};
    snprintf(c, sizeof(c), "%d", clients);
    snprintf(n, sizeof(n), "%ld", requests);
    if (bench_run_capture(argv, out, sizeof(out)) != 0) return -1;
    int w = snprintf(want, sizeof(want), "\"%s\",\"", test);
    for (char *p = want; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
    char *line = strstr(out, want);
    return line ? atof(line + w) : -1;
}
