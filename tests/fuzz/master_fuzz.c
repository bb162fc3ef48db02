/* master_fuzz.c -- helpers of the fuzz targets that drive a real
 * store_master (master_fuzz.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv_client.h"
#include "master_fuzz.h"

void fzm_die(const hx_master *m, const char *target, const char *what)
{
    char line[512];
    FILE *f = fopen(m->log, "r");
    fprintf(stderr, "%s: %s\n", target, what);
    if (f != NULL) {
        fprintf(stderr, "%s: the master's log (%s):\n", target, m->log);
        while (fgets(line, sizeof(line), f) != NULL) fputs(line, stderr);
        fclose(f);
    }
    abort();
}

void fzm_check_alive(hx_master *m, const char *target)
{
    int status;
    if (waitpid(m->pid, &status, WNOHANG) == m->pid) {
        m->pid = 0;
        fzm_die(m, target, WIFSIGNALED(status) ? "the master was killed by a signal"
                                               : "the master exited");
    }
}

void fzm_check_serving(const hx_master *m, const char *target)
{
    kvc *c = hx_client(m);
    kvc_status st;
    int ok = c != NULL && kvc_status_get(c, &st) == 0;
    kvc_close(c);
    if (!ok) fzm_die(m, target, "the master no longer answers a status request");
}

int fzm_connect(const hx_master *m, const char *target)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (strlen(m->socket) >= sizeof(sa.sun_path)) fzm_die(m, target, "the socket path is too long");
    memcpy(sa.sun_path, m->socket, strlen(m->socket) + 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        fzm_die(m, target, "cannot connect");
    return fd;
}
