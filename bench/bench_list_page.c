/* bench_list_page.c -- what one weight_list page costs the weight plugin,
 * in-process, at a given number of revisions.
 *
 * A revision store of N READY revisions is filled with about 2 KiB of
 * other allocations after each revision's entry (in the master: the host's
 * objects, replicas and group of that revision), so at 100,000 revisions a
 * page's rows are far apart in memory as they are in the master -- but at
 * an even stride, which the hardware's own prefetcher follows. With
 * `shuffled` the revisions are added in a random order (the same every
 * run), so that neighbours in identity order are nowhere near each other
 * in memory: a store filled by many publishers of unrelated names. Then
 * pages of 100 are walked by token from the first, as bench_metadata_reads
 * walks them over RPC (back to the first page at the end), and the mean CPU
 * time of a page of the LIST handler is printed for each round of PAGES
 * pages (a round goes on from the token the last one ended with): no
 * socket, no client, only the plugin's work. Under callgrind,
 *
 *   valgrind --tool=callgrind --cache-sim=yes --toggle-collect=wm_rpc_list \
 *       build/bench/bench_list_page 100000 200 1
 *
 * gives the instructions and the simulated cache misses of the pages alone
 * (divide by the page count; callgrind does not model prefetches). The
 * digest printed last is over every answer's bytes: two builds walking the
 * same store answer the same pages when it is the same. Not a target of
 * its own: bench/JOURNAL.md says what it showed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weight_rpc.pb-c.h"
#include "wm_mgmt.h"
#include "wm_plugin.h"
#include "wm_test_records.h"

#define PAGE 100
#define FILLER_BYTES 2048 /* other allocations per revision, as in the master */

struct smp_rpc_call {
    int status;
    uint8_t body[1 << 16];
    size_t len;
};

static int f_rpc_reply(smp_rpc_call *call, int status, const uint8_t *body, size_t len)
{
    call->status = status;
    call->len = len < sizeof(call->body) ? len : sizeof(call->body);
    if (body != NULL) memcpy(call->body, body, call->len);
    return SMP_OK;
}

static void f_log(smp_host *h, smp_log_level l, const char *fmt, ...)
{
    (void)h, (void)l, (void)fmt;
}

/* This thread's CPU seconds: on a shared machine the time waited for a
 * core is left out, the time waited for memory is not. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* FNV-1a of every answer walked, to compare the pages of two builds. */
static uint64_t g_digest = UINT64_C(14695981039346656037);

/* Walk `pages` pages of PAGE from token (updated: where the walk stopped,
 * "" after the last page); the mean CPU microseconds of a page, -1 when a
 * page did not come back. */
static double walk_pages(wm_plugin *p, char token[WM_KEY_MAX + 1], long pages)
{
    static smp_rpc_call call;
    uint8_t req_buf[1024];
    double t0 = cpu_s();
    for (long k = 0; k < pages; k++) {
        Wmrpc__ListRequest req = WMRPC__LIST_REQUEST__INIT;
        req.tenant = (char *)"tenant-a";
        req.namespace_id = (char *)"llm";
        req.limit = PAGE;
        req.page_token = token;
        size_t len = protobuf_c_message_get_packed_size(&req.base);
        protobuf_c_message_pack(&req.base, req_buf);
        wm_rpc_list(p, &call, req_buf, len);
        for (size_t b = 0; b < call.len; b++)
            g_digest = (g_digest ^ call.body[b]) * UINT64_C(1099511628211);
        Wmrpc__ListResponse *resp = wmrpc__list_response__unpack(NULL, call.len, call.body);
        if (call.status != SMP_OK || resp == NULL || resp->n_revisions == 0) {
            fprintf(stderr, "bench: page %ld did not answer a page\n", k);
            wmrpc__list_response__free_unpacked(resp, NULL);
            return -1;
        }
        snprintf(token, WM_KEY_MAX + 1, "%s", resp->next_page_token);
        wmrpc__list_response__free_unpacked(resp, NULL);
    }
    return (cpu_s() - t0) / (double)pages * 1e6;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    long pages = argc > 2 ? atol(argv[2]) : 200;
    long rounds = argc > 3 ? atol(argv[3]) : 5;
    int shuffled = argc > 4 && strcmp(argv[4], "shuffled") == 0;
    static smp_host_api api;
    static wm_plugin p;
    char msg[256], token[WM_KEY_MAX + 1] = "";
    if (n < PAGE || pages < 1 || rounds < 1 || (argc > 4 && !shuffled)) {
        fprintf(stderr, "usage: %s [REVISIONS >= %d] [PAGES] [ROUNDS] [shuffled]\n", argv[0], PAGE);
        return 2;
    }
    api.struct_size = sizeof(api);
    api.rpc_reply = f_rpc_reply;
    api.log = f_log;
    p.api = &api;
    if (wm_store_create(&p.store) != WM_OK) return 1;
    char **filler = calloc((size_t)n, sizeof(*filler));
    long *names = calloc((size_t)n, sizeof(*names));
    if (filler == NULL || names == NULL) return 1;
    for (long i = 0; i < n; i++) names[i] = i;
    uint64_t x = 88172645463325252ull; /* xorshift64: the same order every run */
    for (long i = n - 1; shuffled && i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        long j = (long)(x % (uint64_t)(i + 1)), t = names[i];
        names[i] = names[j], names[j] = t;
    }
    for (long i = 0; i < n; i++) {
        if (wmt_seed_ready(p.store, "model-", names[i], names[i] + 1, msg, sizeof(msg)) != WM_OK) {
            fprintf(stderr, "bench: seed: %s\n", msg);
            return 1;
        }
        if ((filler[i] = malloc(FILLER_BYTES)) == NULL) return 1;
        memset(filler[i], (int)i, FILLER_BYTES);
    }

    double best = -1;
    for (long round = 0; round < rounds; round++) {
        double us = walk_pages(&p, token, pages);
        if (us < 0) return 1;
        printf("%ld revisions: round %ld: %ld pages of %d, %.1f us of CPU per page\n", n, round + 1,
               pages, PAGE, us);
        if (best < 0 || us < best) best = us;
    }
    printf("%ld revisions: best of %ld rounds %.1f us of CPU per page (the handler and the decode "
           "of its answer); pages digest %016llx\n",
           n, rounds, best, (unsigned long long)g_digest);
    for (long i = 0; i < n; i++) free(filler[i]);
    free(filler);
    free(names);
    wm_mgmt_release(&p);
    wm_store_free(p.store);
    return 0;
}
