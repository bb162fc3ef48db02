/* master_fuzz.c -- helpers of the fuzz targets that drive a real
 * store_master (master_fuzz.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host_rpc.pb-c.h"
#include "kv_client.h"
#include "master_fuzz.h"
#include "rpc_client.h"

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

int fzm_role_of(const char *name)
{
    return strcmp(name, "reader") == 0   ? SMP_ROLE_READER
         : strcmp(name, "writer") == 0   ? SMP_ROLE_WRITER
         : strcmp(name, "admin") == 0    ? SMP_ROLE_ADMIN
         : strcmp(name, "anyone") == 0   ? SMP_ROLE_NONE
                                         : FZM_ROLE_UNKNOWN;
}

size_t fzm_load_rules(const hx_master *m, const char *target, const char *admin_token,
                      fzm_rule *out, size_t cap)
{
    char err[256];
    rpcc_conn *c = NULL;
    rpcc_options o = {.timeout_ms = 10000, .token = admin_token};
    uint8_t *body = NULL;
    size_t len = 0, n = 0;
    int status = -1;
    if (rpcc_connect(m->socket, &o, &c, err, sizeof(err)) < 0) fzm_die(m, target, err);
    if (rpcc_call(c, HOST_SERVICE__HOST_SERVICE_AUTH, AUTH_METHOD__AUTH_RULES, NULL, 0, &status,
                  &body, &len, NULL) < 0 ||
        status != 0)
        fzm_die(m, target, "auth.RULES failed");
    AuthRulesResponse *r = auth_rules_response__unpack(NULL, len, body);
    if (r == NULL) fzm_die(m, target, "auth.RULES does not decode");
    for (; n < r->n_rules && n < cap; n++) {
        out[n].service = r->rules[n]->service;
        out[n].method = r->rules[n]->method;
        out[n].role = fzm_role_of(r->rules[n]->role);
    }
    auth_rules_response__free_unpacked(r, NULL);
    free(body);
    rpcc_close(c);
    return n;
}
