/* ha_cluster_fixture.c -- three HA masters and a node on a real etcd, for
 * the HA tests and bench_ha_failover (ha_cluster_fixture.h). Nothing is
 * mocked: real etcd, real store_master and store_node processes. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "etcd_client.h"
#include "ha_cluster_fixture.h"

#define HC_POLL_MS 50
#define HC_REGISTRY_WAIT_MS 10000 /* a master's first registry write, after its lease */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* hc_init, etcd's client port on TLS when tls is set. */
static int init(hc_cluster *c, const char *name, size_t etcd_members, int tls,
                int client_cert_auth)
{
    memset(c, 0, sizeof(*c));
    if ((tls ? etcd_fixture_start_tls(&c->etcd, name, etcd_members, 20000, client_cert_auth)
             : etcd_fixture_start(&c->etcd, name, etcd_members, 20000)) < 0)
        return -1;
    snprintf(c->snapdir, sizeof(c->snapdir), "%s/snapshots", c->etcd.dir);
    if (mkdir(c->snapdir, 0755) < 0) goto fail;
    static unsigned seq;
    snprintf(c->prefix, sizeof(c->prefix), "/wm-%ld-%u/", (long)getpid(), seq++);
    size_t used = 0;
    for (int i = 0; i < HC_MASTERS; i++) {
        char tag[64];
        snprintf(tag, sizeof(tag), "%.40s-m%d", name, i);
        if (hx_init(&c->m[i], tag, NULL) < 0) goto fail;
        int w = snprintf(c->masters + used, sizeof(c->masters) - used, "%s%s", i ? "," : "",
                         c->m[i].socket);
        if (w < 0 || (size_t)w >= sizeof(c->masters) - used) goto fail;
        used += (size_t)w;
    }
    return 0;
fail:
    hc_cleanup(c);
    return -1;
}

int hc_init(hc_cluster *c, const char *name, size_t etcd_members)
{
    return init(c, name, etcd_members, 0, 0);
}

int hc_init_tls(hc_cluster *c, const char *name, size_t etcd_members, int client_cert_auth)
{
    return init(c, name, etcd_members, 1, client_cert_auth);
}

int hc_configure(hc_cluster *c, int i, const char *extra)
{
    char yaml[4096], id[16];
    snprintf(id, sizeof(id), "m%d", i);
    const char *etcd = c->etcd_endpoints[i] ? c->etcd_endpoints[i] : etcd_fixture_endpoints(&c->etcd);
    int n = hx_ha_yaml(&c->m[i], id, etcd, c->prefix, c->snapdir,
                       c->lease_ttl_s, yaml, sizeof(yaml));
    if (n < 0) return -1;
    /* extra may set node: itself (it must then say embedded: false) */
    int own_node = extra != NULL && (strncmp(extra, "node:", 5) == 0 || strstr(extra, "\nnode:") != NULL);
    int w = snprintf(yaml + n, sizeof(yaml) - (size_t)n, "%s%s", extra ? extra : "",
                     own_node ? "" : "node:\n  embedded: false\n");
    if (w < 0 || (size_t)w >= sizeof(yaml) - (size_t)n) return -1;
    return hx_reconfigure(&c->m[i], yaml);
}

int hc_list_view(const hc_cluster *c, hx_master *view)
{
    *view = c->m[0];
    if (strlen(c->masters) >= sizeof(view->socket)) return -1;
    memcpy(view->socket, c->masters, strlen(c->masters) + 1);
    view->pid = 0;
    return 0;
}

char *hc_role(const hx_master *m)
{
    char *body = NULL;
    if (m->pid <= 0 || hx_http_get(m, "/role", &body) != 200) {
        free(body);
        return NULL;
    }
    body[strcspn(body, "\n")] = '\0';
    return body;
}

int hc_wait_leader(hc_cluster *c, int skip, int timeout_ms)
{
    for (long long end = hx_now_ms() + timeout_ms;;) {
        int found = -1, n = 0;
        for (int i = 0; i < HC_MASTERS; i++) {
            if (i == skip) continue;
            char *r = hc_role(&c->m[i]);
            if (r != NULL && strcmp(r, "leader") == 0) {
                found = i;
                n++;
            }
            free(r);
        }
        if (n == 1) return found;
        if (hx_now_ms() >= end) break;
        sleep_ms(HC_POLL_MS);
    }
    if (timeout_ms <= 0) return -1;
    fprintf(stderr, "ha_cluster: no single leader within %d ms\n", timeout_ms);
    for (int i = 0; i < HC_MASTERS; i++) {
        if (i == skip || c->m[i].pid <= 0) continue;
        char *r = hc_role(&c->m[i]);
        fprintf(stderr, "ha_cluster: master %d: role \"%s\"\n", i, r ? r : "(none)");
        free(r);
        hc_print_tail(c->m[i].log);
    }
    return -1;
}

int hc_wait_role(hc_cluster *c, int i, const char *want, int timeout_ms)
{
    for (long long end = hx_now_ms() + timeout_ms;;) {
        char *r = hc_role(&c->m[i]);
        int ok = r != NULL && strncmp(r, want, strlen(want)) == 0;
        free(r);
        if (ok) return 0;
        if (hx_now_ms() >= end) break;
        sleep_ms(HC_POLL_MS);
    }
    char *r = hc_role(&c->m[i]);
    fprintf(stderr, "ha_cluster: master %d: role \"%s\", wanted \"%s\"\n", i, r ? r : "(none)",
            want);
    free(r);
    hc_print_tail(c->m[i].log);
    return -1;
}

int hc_node_start(hc_cluster *c, const char *id, unsigned long long segment_bytes)
{
    hx_master view; /* the node's files live in master 0's dir */
    if (hc_list_view(c, &view) < 0) return -1;
    return hx_node_start(&view, &c->node, id, segment_bytes);
}

int hc_wait_node(hc_cluster *c, int i, int timeout_ms)
{
    if (hx_wait_nodes(&c->m[i], 1, timeout_ms) == 0) return 0;
    fprintf(stderr, "ha_cluster: node not registered with master %d\n", i);
    hc_print_tail(c->node.log);
    hc_print_tail(c->m[i].log);
    return -1;
}

void hc_print_tail(const char *path)
{
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "echo '---- %s' >&2; tail -n 30 '%s' >&2", path, path);
    if (system(cmd) != 0) fprintf(stderr, "(no %s)\n", path);
}

void hc_cleanup(hc_cluster *c)
{
    hx_node_kill(&c->node);
    for (int i = 0; i < HC_MASTERS; i++) {
        if (c->m[i].pid > 0) kill(c->m[i].pid, SIGCONT);
        if (c->m[i].dir[0] != '\0') hx_cleanup(&c->m[i]);
    }
    etcd_fixture_cleanup(&c->etcd);
}

int hc_leader_key_of(hc_cluster *c, int i)
{
    char err[256] = "", key[200];
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(&c->etcd)};
    etcd_fixture_client_tls(&c->etcd, &o);
    etcd_client *ec = NULL;
    etcd_range_result reg = {0};
    int rc = -1;
    if (etcd_client_open(&o, &ec, err, sizeof(err)) < 0) goto out;
    snprintf(key, sizeof(key), "%smasters/m%d", c->prefix, i);
    /* a master answers "standby" before its first registry write (which
     * waits for its lease), so the entry may take a moment to appear */
    for (long long end = hx_now_ms() + HC_REGISTRY_WAIT_MS;; sleep_ms(HC_POLL_MS)) {
        etcd_range_result_free(&reg);
        if (etcd_range(ec, key, strlen(key), NULL, 0, 0, 0, 0, &reg, err, sizeof(err)) < 0)
            goto out;
        if (reg.n == 1 && reg.kvs[0].lease != 0) break;
        if (hx_now_ms() >= end) {
            snprintf(err, sizeof(err), "no registry entry of m%d under a lease after %d ms", i,
                     HC_REGISTRY_WAIT_MS);
            goto out;
        }
    }
    snprintf(key, sizeof(key), "%sleader", c->prefix);
    if (etcd_put(ec, key, strlen(key), reg.kvs[0].value, reg.kvs[0].value_len, reg.kvs[0].lease,
                 NULL, err, sizeof(err)) < 0)
        goto out;
    rc = 0;
out:
    if (rc < 0) fprintf(stderr, "ha_cluster: the leader key of m%d: %s\n", i, err);
    etcd_range_result_free(&reg);
    etcd_client_close(ec);
    return rc;
}
