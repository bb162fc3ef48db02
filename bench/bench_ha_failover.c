/* bench_ha_failover.c -- how long an HA cluster cannot take writes after its
 * leader dies.
 *
 * Starts a real etcd (tests/integration/etcd_fixture.c) and three
 * store_master processes in HA mode with the default lease TTL (2 s) or the
 * one given, plus one store_node following them. Each run SIGKILLs the
 * leader while a client keeps writing, and measures from the kill to the
 * first write the new leader acknowledges; the killed master is restarted
 * (it rejoins as a standby) before the next run. It does so twice, on two
 * fresh clusters: as configured by default (standbys notice the leader's
 * exit through their connection to it and revoke its lease), then with
 * ha.fast_failover off, where only the lease's expiry ends the dead
 * leader's term: that second figure is the baseline. Prints every run, both
 * medians and their ratio.
 *
 * The probe above asks each master whether it leads and writes to the new
 * leader directly. An application does not: it holds one connection given
 * the list of masters and lets the client library find the leader (lost
 * stream, NOT_LEADER answers naming the leader or no one). So each run also
 * has such a client (kvc, connected to the list before the kill) write from
 * its own thread, every 10 ms until one write is acknowledged, and reports
 * that time too, with how many of its writes failed before (and the first
 * failure's message).
 *
 * Usage: bench_ha_failover [RUNS (5)] [TTL_S (2)] */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_summary.h"
#include "ha_cluster_fixture.h"
#include "harness.h"


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

/* A client of the master list writing until one write is acknowledged. */
typedef struct list_writer {
    kvc *c;
    int n;             /* key numbers of its own */
    uint64_t t0;       /* the kill */
    uint64_t took_us;  /* 0 while none was acknowledged */
    int refused;       /* writes before it that failed */
    char first_refusal[160]; /* the first one's message */
} list_writer;

static void *list_write(void *arg)
{
    list_writer *w = arg;
    char key[64];
    while (now_us() - w->t0 < 30000000u) {
        snprintf(key, sizeof(key), "bench/list-%d", w->n++);
        if (kvc_put_bytes(w->c, key, "x", 1, SMP_DATA_KV, NULL, 0, NULL) == 0) {
            w->took_us = now_us() - w->t0;
            break;
        }
        if (w->refused++ == 0)
            snprintf(w->first_refusal, sizeof(w->first_refusal), "%s", kvc_error(w->c));
        usleep(10000);
    }
    return NULL;
}

/* The cluster's masters as a list, into out. */
static void master_list_of(const hc_cluster *c, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < HC_MASTERS && used < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s%s", i ? "," : "", c->m[i].socket);
}

/* Run the SIGKILL loop `runs` times on a fresh cluster; *median_us gets the
 * median. fast: ha.fast_failover as configured (the standbys' watch of the
 * leader's process), else only the lease's expiry ends a dead leader's term.
 * 0, or -1 when a run found no leader taking writes (reported). */
static int measure(int fast, int runs, unsigned ttl, uint64_t *median_us, uint64_t *list_median_us)
{
    static hc_cluster c; /* zeroed: hc_cleanup is safe before hc_init */
    uint64_t *took = calloc((size_t)runs, sizeof(*took));
    uint64_t *list_took = calloc((size_t)runs, sizeof(*list_took));
    char masters[2048], err[512];
    list_writer w = {0};
    const char *mode = fast ? "fast_failover on" : "fast_failover off, lease expiry only";
    int status = -1;
    memset(&c, 0, sizeof(c));
    if (took == NULL || list_took == NULL || hc_init(&c, "bench-failover", 1) < 0) goto out;
    c.lease_ttl_s = ttl;
    for (int i = 0; i < HC_MASTERS; i++)
        if (hc_configure(&c, i, fast ? NULL : "  fast_failover: false\n") < 0 ||
            hx_start(&c.m[i], 20000) < 0)
            goto out;
    if (hc_node_start(&c, "bench-n1", 16u << 20) < 0) goto out;
    master_list_of(&c, masters, sizeof(masters));

    int n = 0;
    for (int r = 0; r < runs; r++) {
        int leader = hc_wait_leader(&c, -1, 20000);
        if (leader < 0 || hc_wait_node(&c, leader, 20000) < 0 || try_put(&c.m[leader], n++) < 0) {
            fprintf(stderr, "%s, run %d: no leader taking writes\n", mode, r);
            goto out;
        }
        char key[64];
        snprintf(key, sizeof(key), "bench/list-%d", w.n++); /* it writes through the leader */
        if (kvc_connect(masters, 5000, &w.c, err, sizeof(err)) < 0 ||
            kvc_put_bytes(w.c, key, "x", 1, SMP_DATA_KV, NULL, 0, NULL) < 0) {
            fprintf(stderr, "%s, run %d: a client of the list cannot write: %s\n", mode, r,
                    w.c ? kvc_error(w.c) : err);
            goto out;
        }
        pthread_t writer;
        uint64_t t0 = now_us();
        hx_kill(&c.m[leader]);
        w.t0 = t0;
        w.took_us = 0;
        w.refused = 0;
        w.first_refusal[0] = '\0';
        if (pthread_create(&writer, NULL, list_write, &w) != 0) goto out;
        uint64_t t1 = 0, t_lead = 0;
        while (t1 == 0 && now_us() - t0 < 30000000u) {
            int next = hc_wait_leader(&c, leader, 0);
            if (next >= 0 && t_lead == 0) t_lead = now_us();
            if (next >= 0 && try_put(&c.m[next], n++) == 0)
                t1 = now_us();
            else
                usleep(10000);
        }
        pthread_join(writer, NULL);
        kvc_close(w.c);
        w.c = NULL;
        if (t1 == 0 || w.took_us == 0) {
            fprintf(stderr, "%s, run %d: no write acknowledged within 30 s (%s)\n", mode, r,
                    t1 == 0 ? "probe" : "client of the list");
            goto out;
        }
        took[r] = t1 - t0;
        list_took[r] = w.took_us;
        printf("%s, run %d: leader m%d SIGKILLed -> first write acknowledged by the new leader "
               "in %.0f ms (it said leader after %.0f ms); by a client of the list in %.0f ms "
               "(%d writes failed before it%s%s)\n",
               mode, r, leader, (double)took[r] / 1000.0, (double)(t_lead - t0) / 1000.0,
               (double)list_took[r] / 1000.0, w.refused, w.refused ? ", the first: " : "",
               w.first_refusal);
        fflush(stdout);
        if (hx_start(&c.m[leader], 20000) < 0) goto out; /* back as a standby */
    }
    qsort(took, (size_t)runs, sizeof(*took), cmp_u64);
    qsort(list_took, (size_t)runs, sizeof(*list_took), cmp_u64);
    printf("ha failover, %s: median %.0f ms of %d runs (%.0f..%.0f), a client of the list %.0f ms "
           "(%.0f..%.0f), lease TTL %u s\n", mode, (double)took[runs / 2] / 1000.0, runs,
           (double)took[0] / 1000.0, (double)took[runs - 1] / 1000.0,
           (double)list_took[runs / 2] / 1000.0, (double)list_took[0] / 1000.0,
           (double)list_took[runs - 1] / 1000.0, ttl);
    *median_us = took[runs / 2];
    *list_median_us = list_took[runs / 2];
    status = 0;
out:
    if (w.c != NULL) kvc_close(w.c);
    hc_cleanup(&c);
    free(took);
    free(list_took);
    return status;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 5;
    unsigned ttl = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
    if (runs < 1 || ttl < 1) {
        fprintf(stderr, "usage: %s [RUNS] [TTL_S]\n", argv[0]);
        return 2;
    }
    uint64_t fast = 0, lease = 0, fast_list = 0, lease_list = 0;
    if (measure(1, runs, ttl, &fast, &fast_list) < 0 || measure(0, runs, ttl, &lease, &lease_list) < 0)
        return 1;
    printf("ha failover (SIGKILL of the leader -> first acknowledged write): median %.0f ms "
           "with the default ha.fast_failover, %.0f ms by lease expiry alone (x%.2f), lease TTL "
           "%u s (target <= 2000 ms)\n", (double)fast / 1000.0, (double)lease / 1000.0,
           lease ? (double)fast / (double)lease : 0.0, ttl);
    char f1[32], f2[48];
    bench_summary("HA failover, SIGKILL of the leader to the first acknowledged write",
                  bench_fmt(f1, sizeof(f1), "%.0f ms median", (double)fast / 1000.0),
                  bench_fmt(f2, sizeof(f2), "lease expiry alone %.0f ms", (double)lease / 1000.0),
                  lease ? (double)fast / (double)lease : -1, "<= 2000 ms");
    printf("ha failover, a client of the master list: median %.0f ms with the default "
           "ha.fast_failover, %.0f ms by lease expiry alone (x%.2f)\n", (double)fast_list / 1000.0,
           (double)lease_list / 1000.0, lease_list ? (double)fast_list / (double)lease_list : 0.0);
    bench_summary("HA failover, SIGKILL of the leader to a list client's first acknowledged write",
                  bench_fmt(f1, sizeof(f1), "%.0f ms median", (double)fast_list / 1000.0),
                  bench_fmt(f2, sizeof(f2), "lease expiry alone %.0f ms", (double)lease_list / 1000.0),
                  lease_list ? (double)fast_list / (double)lease_list : -1, "<= 2000 ms");
    return 0;
}
