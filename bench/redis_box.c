/* redis_box.c -- a redis-server of a benchmark's own and redis-benchmark
 * against it (redis_box.h). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest_memory.h"
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


/* Fork and exec redis-server on r's directory and socket, logging to
 * redis.log there; wait until the socket exists. 0 or -1. */
static int redis_spawn(redis_box *r)
{
    struct stat st;
    char log[700];
    snprintf(log, sizeof(log), "%s/redis.log", r->dir);
    unlink(r->sock);
    r->pid = fork();
    if (r->pid < 0) return -1;
    if (r->pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", r->sock, "--dir",
               r->dir, "--appendonly", r->durable ? "yes" : "no", "--appendfsync", "always",
               "--save", "", "--logfile", log, "--enable-debug-command", "local",
               /* an RDB holds the bytes it was given (redis_populate_sized) */
               "--rdbcompression", "no", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 400; i++) {
        if (stat(r->sock, &st) == 0) return 0;
        if (waitpid(r->pid, NULL, WNOHANG) == r->pid) {
            r->pid = 0;
            return -1;
        }
        usleep(25000);
    }
    return -1;
}

int redis_start(redis_box *r, const char *parent, int durable)
{
    snprintf(r->dir, sizeof(r->dir), "%s/redis-XXXXXX", parent);
    r->pid = 0;
    r->durable = durable;
    if (mkdtemp(r->dir) == NULL) {
        fprintf(stderr, "redis: cannot make a directory under %s: %s\n", parent, strerror(errno));
        r->dir[0] = '\0';
        return -1;
    }
    snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
    return redis_spawn(r);
}

/* redis-cli on r's socket with the given arguments (up to a NULL); 0, or -1
 * when it failed or answered an error. */
static int redis_cli(const redis_box *r, const char *a1, const char *a2, const char *a3,
                     const char *a4, const char *a5)
{
    char out[4096];
    char *argv[] = {"redis-cli", "-s", (char *)r->sock, (char *)a1, (char *)a2, (char *)a3,
                    (char *)a4, (char *)a5, NULL};
    int rc = bench_run_capture(argv, out, sizeof(out));
    return rc != 0 || strstr(out, "ERR") != NULL ? -1 : 0;
}

int redis_populate(const redis_box *r, long n)
{
    char count[32];
    snprintf(count, sizeof(count), "%ld", n);
    return redis_cli(r, "DEBUG", "POPULATE", count, "key", NULL);
}

int redis_flush(const redis_box *r)
{
    return redis_cli(r, "FLUSHALL", NULL, NULL, NULL, NULL);
}

int redis_populate_sized(const redis_box *r, long n, long value_bytes)
{
    char count[32], size[32];
    snprintf(count, sizeof(count), "%ld", n);
    snprintf(size, sizeof(size), "%ld", value_bytes);
    return redis_flush(r) < 0 ? -1 : redis_cli(r, "DEBUG", "POPULATE", count, "key", size);
}

double redis_reload_seconds(redis_box *r, size_t back)
{
    char path[700], line[512];
    double secs = -1;
    if (redis_cli(r, "SAVE", NULL, NULL, NULL, NULL) < 0) return -1;
    kill(r->pid, SIGTERM);
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
    if (back > 0) (void)bench_back_memory(back);
    snprintf(path, sizeof(path), "%s/redis.log", r->dir);
    if (truncate(path, 0) < 0 || redis_spawn(r) < 0) return -1;
    for (int i = 0; i < 2400 && secs < 0; i++) {
        FILE *f = fopen(path, "r");
        while (f != NULL && fgets(line, sizeof(line), f)) {
            char *p = strstr(line, "DB loaded from disk: ");
            if (p != NULL) secs = atof(p + strlen("DB loaded from disk: "));
        }
        if (f != NULL) fclose(f);
        if (secs < 0) usleep(25000);
    }
    return secs;
}

double redis_rdb_bytes(const redis_box *r)
{
    char path[700];
    struct stat st;
    snprintf(path, sizeof(path), "%s/dump.rdb", r->dir);
    return stat(path, &st) == 0 ? (double)st.st_size : -1;
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
