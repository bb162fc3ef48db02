/* bench_ha_failover.c -- how long an HA cluster cannot take writes after its
 * leader dies.
 *
 * Starts a real etcd (tests/integration/etcd_fixture.c) and three
 * store_master processes in HA mode with the default lease TTL (2 s) or the
 * one given, plus one store_node following them. Each run SIGKILLs the
 * leader while a client keeps writing, and measures from the kill to the
 * first write the new leader acknowledges; the killed master is restarted
 * (it rejoins as a standby) before the next run. Prints every run and the
 * median, next to the lease TTL (the floor: etcd deletes the leader key
 * only when the lease expires).
 *
 * Usage: bench_ha_failover [RUNS (5)] [TTL_S (2)] */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "etcd_fixture.h"
#include "harness.h"

#define N_MASTERS 3

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int write_config(hx_master *m, int i, const etcd_fixture *e, const char *snapdir,
                        unsigned ttl)
{
    char extra[2048];
    snprintf(extra, sizeof(extra),
             "oplog:\n  backend: etcd\n"
             "ha:\n  enabled: true\n  id: m%d\n  etcd_endpoints: \"%s\"\n"
             "  prefix: \"/bench-%ld/\"\n  lease_ttl_s: %u\n  advertise: \"%s\"\n"
             "  snapshot_dir: \"%s\"\n"
             "node:\n  embedded: false\n",
             i, etcd_fixture_endpoints(e), (long)getpid(), ttl, m->socket, snapdir);
    return hx_reconfigure(m, extra);
}

/* The index of the one master whose /role says leader, or -1. */
static int find_leader(hx_master *ms, int skip)
{
    for (int i = 0; i < N_MASTERS; i++) {
        char *body = NULL;
        if (i == skip || ms[i].pid <= 0) continue;
        int st = hx_http_get(&ms[i], "/role", &body);
        int yes = st == 200 && strncmp(body, "leader\n", 7) == 0;
        free(body);
        if (yes) return i;
    }
    return -1;
}

/* One write to master i; 0 when acknowledged. */
static int try_put(hx_master *m, int n)
{
    kvc *c = NULL;
    char err[256], key[64];
    if (kvc_connect(m->socket, 1000, &c, err, sizeof(err)) < 0) return -1;
    snprintf(key, sizeof(key), "bench/%d", n);
    int rc = kvc_put_bytes(c, key, "x", 1, SMP_DATA_KV, NULL, 0, NULL);
    kvc_close(c);
    return rc;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 5;
    unsigned ttl = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
    if (runs < 1 || ttl < 1) {
        fprintf(stderr, "usage: %s [RUNS] [TTL_S]\n", argv[0]);
        return 2;
    }
    etcd_fixture e;
    hx_master ms[N_MASTERS];
    hx_node node;
    char snapdir[300], list[320] = "";
    uint64_t *took = calloc((size_t)runs, sizeof(*took));
    int status = 1;
    memset(ms, 0, sizeof(ms));
    memset(&node, 0, sizeof(node));
    if (took == NULL || etcd_fixture_start(&e, "bench-failover", 1, 20000) < 0) return 1;
    snprintf(snapdir, sizeof(snapdir), "%s/snapshots", e.dir);
    mkdir(snapdir, 0755);
    for (int i = 0; i < N_MASTERS; i++) {
        char name[32];
        snprintf(name, sizeof(name), "bench-ha-m%d", i);
        if (hx_init(&ms[i], name, NULL) < 0 || write_config(&ms[i], i, &e, snapdir, ttl) < 0 ||
            hx_start(&ms[i], 20000) < 0)
            goto out;
        size_t used = strlen(list);
        snprintf(list + used, sizeof(list) - used, "%s%s", i ? "," : "", ms[i].socket);
    }
    hx_master view = ms[0];
    if (strlen(list) >= sizeof(view.socket)) goto out;
    memcpy(view.socket, list, strlen(list) + 1);
    if (hx_node_start(&view, &node, "bench-n1", 16u << 20) < 0) goto out;

    int n = 0;
    for (int r = 0; r < runs; r++) {
        int leader = -1;
        for (int w = 0; w < 400 && (leader = find_leader(ms, -1)) < 0; w++) usleep(50000);
        if (leader < 0 || hx_wait_nodes(&ms[leader], 1, 20000) < 0 || try_put(&ms[leader], n++) < 0) {
            fprintf(stderr, "run %d: no leader taking writes\n", r);
            goto out;
        }
        uint64_t t0 = now_us();
        hx_kill(&ms[leader]);
        uint64_t t1 = 0;
        while (t1 == 0 && now_us() - t0 < 30000000u) {
            int next = find_leader(ms, leader);
            if (next >= 0 && try_put(&ms[next], n++) == 0) t1 = now_us();
            else usleep(10000);
        }
        if (t1 == 0) {
            fprintf(stderr, "run %d: no write acknowledged within 30 s\n", r);
            goto out;
        }
        took[r] = t1 - t0;
        printf("run %d: leader m%d SIGKILLed -> first write acknowledged by the new leader in "
               "%.0f ms\n", r, leader, (double)took[r] / 1000.0);
        fflush(stdout);
        if (hx_start(&ms[leader], 20000) < 0) goto out; /* back as a standby */
    }
    qsort(took, (size_t)runs, sizeof(*took), cmp_u64);
    printf("ha failover (SIGKILL of the leader -> first acknowledged write): median %.0f ms of "
           "%d runs (%.0f..%.0f), lease TTL %u s: x%.2f of the TTL\n",
           (double)took[runs / 2] / 1000.0, runs, (double)took[0] / 1000.0,
           (double)took[runs - 1] / 1000.0, ttl, (double)took[runs / 2] / 1e6 / ttl);
    status = 0;
out:
    hx_node_kill(&node);
    for (int i = 0; i < N_MASTERS; i++) hx_cleanup(&ms[i]);
    etcd_fixture_cleanup(&e);
    free(took);
    return status;
}
