/* raw_etcd.c -- plain etcd writes from C threads, the baseline of the etcd
 * benchmarks (raw_etcd.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <uv.h>

#include "raw_etcd.h"

typedef struct raw_worker {
    pthread_t thread;
    int id;
    int txn;       /* the OpLog's txn shape instead of a plain put */
    int run;
    uint64_t deadline_ns;
    uint64_t done;
    int failed;
    etcd_client *cli;
} raw_worker;

static void *raw_main(void *arg)
{
    raw_worker *w = arg;
    etcd_client *cli = w->cli;
    char key[64], err[256];
    uint8_t val[RAW_ETCD_PAYLOAD];
    memset(val, 0x5c, sizeof(val));
    uint8_t rec[RAW_ETCD_PAYLOAD + 28];
    char head[64], rkey[96], hval[24];
    int64_t mod = 0;
    memset(rec, 0x5c, sizeof(rec));
    snprintf(key, sizeof(key), "/bench/raw/%d", w->id);
    snprintf(head, sizeof(head), "/bench/txn/%d-%d/log_head", w->id, w->run);
    while (uv_hrtime() < w->deadline_ns) {
        int rc;
        if (!w->txn) {
            rc = etcd_put(cli, key, strlen(key), val, sizeof(val), 0, NULL, err, sizeof(err));
        } else {
            etcd_txn_result res;
            snprintf(rkey, sizeof(rkey), "/bench/txn/%d-%d/log/%020" PRIu64, w->id, w->run,
                     w->done + 1);
            snprintf(hval, sizeof(hval), "%" PRIu64, w->done + 1);
            etcd_compare cmp = {.target = ETCD_CMP_MOD, .result = ETCD_CMP_EQUAL,
                                .key = head, .key_len = strlen(head), .number = mod};
            etcd_op ops[2] = {
                {.type = ETCD_OP_PUT, .key = rkey, .key_len = strlen(rkey), .value = rec,
                 .value_len = sizeof(rec)},
                {.type = ETCD_OP_PUT, .key = head, .key_len = strlen(head), .value = hval,
                 .value_len = strlen(hval)},
            };
            rc = etcd_txn(cli, &cmp, 1, ops, 2, NULL, 0, &res, err, sizeof(err));
            if (rc == 0) {
                if (!res.succeeded) {
                    snprintf(err, sizeof(err), "the head compare failed");
                    rc = -1;
                }
                mod = res.revision;
                etcd_txn_result_free(&res);
            }
        }
        if (rc < 0) {
            fprintf(stderr, "raw_etcd: raw %s: %s\n", w->txn ? "txn" : "put", err);
            w->failed = 1;
            break;
        }
        w->done++;
    }
    return NULL;
}

double raw_etcd_rate(etcd_client *cli, int threads, double seconds, int txn, int run)
{
    raw_worker w[RAW_ETCD_MAX_THREADS];
    if (threads < 1 || threads > RAW_ETCD_MAX_THREADS) return -1;
    uint64_t t0 = uv_hrtime(), total = 0;
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].id = i;
        w[i].txn = txn;
        w[i].run = run;
        w[i].cli = cli;
        w[i].deadline_ns = t0 + (uint64_t)(seconds * 1e9);
        if (pthread_create(&w[i].thread, NULL, raw_main, &w[i]) != 0)
            return -1;
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].thread, NULL);
        total += w[i].done;
        failed |= w[i].failed;
    }
    if (failed)
        return -1;
    return (double)total / ((double)(uv_hrtime() - t0) / 1e9);
}

