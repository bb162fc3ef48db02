/* bench_etcd_oplog.c -- what the etcd OpLog's batching buys over single puts.
 *
 * Usage: bench_etcd_oplog [seconds] [tls]   (default 3 s per run)
 *
 * Starts its own 1-member etcd (tests/integration/etcd_fixture: Debian's
 * /usr/bin/etcd, data under a mkdtemp directory in /tmp, on the same disk as
 * everything else here), then measures, at 1 and 64 concurrent writers:
 *   raw    etcd_put of a 256-byte value from T threads, each to its own key
 *          (one Put RPC per durable write: what a naive backend would do);
 *   txn    the same with the OpLog's txn shape, one record per txn: each
 *          thread puts a 284-byte record key and its own head key, comparing
 *          the head's mod revision (what the batching writer costs per txn);
 *   oplog  durable appends of 256-byte records through the etcd OpLog backend
 *          after a promote with an election stand-in: C clients, each with
 *          one append outstanding and the next issued from its durable
 *          callback (the batching writer puts whatever queued meanwhile, up
 *          to 127 records, in one txn).
 * Each setting runs 3 times, raw, txn and oplog in turn; the median of each
 * is printed with the ratio oplog / raw. With `tls`, etcd serves its client
 * port over TLS only and asks for a client certificate (--client-cert-auth,
 * as ha.etcd_tls_* meets it): raw puts and appends alike go over TLS. Not a test: the numbers depend on the
 * disk's fsync and the cores. etcd and its directory are removed at the end. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_summary.h"
#include "etcd_client.h"
#include "etcd_fixture.h"
#include "oplog.h"
#include "oplog_drive.h"
#include "raw_etcd.h"

#define PAYLOAD RAW_ETCD_PAYLOAD
_Static_assert(RAW_ETCD_PAYLOAD == OPLOG_DRIVE_PAYLOAD,
               "the raw puts and the OpLog's records carry as many bytes");
#define RUNS 3

static etcd_client *cli;

/* -- the etcd OpLog --------------------------------------------------------- */

/* The promote's answer. */
typedef struct promoted {
    int done;
    int status;
} promoted;

static void on_promoted(void *arg, int status)
{
    promoted *p = arg;
    p->done = 1;
    p->status = status;
}

static int no_records(void *arg, const oplog_record *rec)
{
    (void)arg;
    (void)rec;
    return 0;
}

static void quiet(void *arg, const char *line)
{
    (void)arg;
    (void)line;
}

/* Durable appends per second with `clients` outstanding, or a negative
 * value; *per_txn gets the records per txn. Each run writes under its own
 * prefix with its own election. */
static double run_oplog(int clients, double seconds, int run, double *per_txn)
{
    char prefix[64], leader[96], err[256] = "";
    oplog_etcd_options o = {0};
    oplog_etcd_fence f = {0};
    oplog_stats st;
    uv_loop_t loop;
    oplog *log;
    oplog_drive b;
    promoted pr = {0, 0};
    int64_t lease = 0;
    etcd_txn_result res;
    uint64_t elapsed;
    double rate = -1;

    snprintf(prefix, sizeof(prefix), "/bench/oplog/c%d-r%d/", clients, run);
    snprintf(leader, sizeof(leader), "%sleader", prefix);
    if (uv_loop_init(&loop) != 0)
        return -1;
    o.client = cli;
    o.prefix = prefix;
    o.log_line = quiet;
    if (oplog_etcd_open(&loop, &o, &log, err, sizeof(err)) < 0) {
        fprintf(stderr, "bench_etcd_oplog: %s\n", err);
        uv_loop_close(&loop);
        return -1;
    }
    /* The election stand-in: a lease and the leader key attached to it. */
    if (etcd_lease_grant(cli, 30, &lease, NULL, err, sizeof(err)) < 0)
        goto close_log;
    etcd_op put = {.type = ETCD_OP_PUT, .key = leader, .key_len = strlen(leader),
                   .value = "bench", .value_len = 5, .lease = lease};
    if (etcd_txn(cli, NULL, 0, &put, 1, NULL, 0, &res, err, sizeof(err)) < 0)
        goto revoke;
    f.leader_key = leader;
    f.leader_key_len = strlen(leader);
    f.lease_id = lease;
    f.create_revision = res.revision;
    f.lease_ttl_ms = 30000;
    etcd_txn_result_free(&res);
    if (oplog_etcd_promote(log, &f, no_records, NULL, on_promoted, &pr) < 0)
        goto revoke;
    while (!pr.done)
        uv_run(&loop, UV_RUN_ONCE);
    if (pr.status != 0) {
        fprintf(stderr, "bench_etcd_oplog: promote: %s\n", smp_strerror(pr.status));
        goto revoke;
    }
    elapsed = oplog_drive_run(&b, log, "bench_etcd_oplog", &loop, clients, seconds);
    oplog_stats_get(log, &st);
    *per_txn = st.syncs ? (double)st.durable_count / (double)st.syncs : 0.0;
    if (!b.failed)
        rate = (double)b.done / ((double)elapsed / 1e9);
revoke:
    if (rate < 0 && err[0] != '\0')
        fprintf(stderr, "bench_etcd_oplog: %s\n", err);
    (void)etcd_lease_revoke(cli, lease, NULL, 0);
close_log:
    oplog_close(log);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rate;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 3.0;
    int tls = argc > 2 && strcmp(argv[2], "tls") == 0;
    static const int settings[] = {1, 64};
    etcd_fixture fx;
    etcd_client_options co = {0};
    char err[256];
    int rc = 0;

    if (seconds <= 0 || seconds > 60 || (argc > 2 && !tls)) {
        fprintf(stderr, "usage: bench_etcd_oplog [seconds 0..60] [tls]\n");
        return 2;
    }
    if ((tls ? etcd_fixture_start_tls(&fx, "bench_etcd_oplog", 1, 20000, 1)
             : etcd_fixture_start(&fx, "bench_etcd_oplog", 1, 20000)) != 0) {
        fprintf(stderr, "bench_etcd_oplog: etcd did not start\n");
        return 1;
    }
    co.endpoints = etcd_fixture_endpoints(&fx);
    etcd_fixture_client_tls(&fx, &co);
    if (etcd_client_open(&co, &cli, err, sizeof(err)) < 0) {
        fprintf(stderr, "bench_etcd_oplog: %s\n", err);
        etcd_fixture_cleanup(&fx);
        return 1;
    }
    printf("bench_etcd_oplog: 1-member etcd %s%s (data in %s), %d-byte records, "
           "%.1f s per run, median of %d\n", co.endpoints, tls ? " over TLS, client certificates" : "",
           fx.dir, PAYLOAD, seconds, RUNS);
    for (size_t s = 0; s < sizeof(settings) / sizeof(settings[0]); s++) {
        int c = settings[s];
        double raw[RUNS], txn[RUNS], log[RUNS], per_txn[RUNS];
        for (int r = 0; r < RUNS; r++) {
            raw[r] = raw_etcd_rate(cli, c, seconds, 0, r);
            txn[r] = raw_etcd_rate(cli, c, seconds, 1, (int)s * RUNS + r);
            log[r] = run_oplog(c, seconds, r, &per_txn[r]);
            if (raw[r] < 0 || txn[r] < 0 || log[r] < 0) {
                rc = 1;
                goto out;
            }
            printf("  run %d  writers %2d  raw puts/s %8.0f  raw txns/s %8.0f  oplog "
                   "appends/s %8.0f  records/txn %6.2f\n", r + 1, c, raw[r], txn[r], log[r],
                   per_txn[r]);
        }
        qsort(raw, RUNS, sizeof(double), cmp_double);
        qsort(txn, RUNS, sizeof(double), cmp_double);
        qsort(log, RUNS, sizeof(double), cmp_double);
        qsort(per_txn, RUNS, sizeof(double), cmp_double);
        printf("median  writers %2d  raw etcd_put/s %8.0f  raw txn/s %8.0f  etcd oplog durable "
               "appends/s %8.0f  records/txn %6.2f  oplog/raw x%.2f\n", c, raw[RUNS / 2],
               txn[RUNS / 2], log[RUNS / 2], per_txn[RUNS / 2], log[RUNS / 2] / raw[RUNS / 2]);
        fflush(stdout);
        char w[80], f1[32], f2[64];
        bench_summary(bench_fmt(w, sizeof(w), "etcd OpLog appends%s, %d writer%s",
                                tls ? " over TLS" : "", c, c > 1 ? "s" : ""),
                      bench_fmt(f1, sizeof(f1), "%.0f/s", log[RUNS / 2]),
                      bench_fmt(f2, sizeof(f2), "raw etcd put%s %.0f/s", tls ? " (TLS)" : "",
                                raw[RUNS / 2]),
                      log[RUNS / 2] / raw[RUNS / 2], c > 1 ? ">= 2x" : "");
    }
out:
    etcd_client_close(cli);
    etcd_fixture_cleanup(&fx);
    return rc;
}
