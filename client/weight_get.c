/* weight_get.c -- the load of libweightclient: a revision into the caller's
 * buffers, resharded, under a revision lease.
 *
 * The sequence is the RFC's: acquire a generation-fenced lease (the reply
 * carries the metadata: manifest key and SHA-256) -> start a helper thread
 * that renews the lease at a third of its TTL while the load runs -> read
 * the manifest and verify its SHA-256 and identity (a mismatch is
 * WEIGHT_EDIGEST_MISMATCH and nothing is written) -> ask the caller's
 * placement for each tensor's target box and its bindings for the buffers
 * -> wc_plan_build -> transfer -> give back the read leases the object
 * lookups took (kvc_release_read_leases) and release the lease (on success,
 * error and cancellation alike; a crashed caller's lease expires by TTL, its
 * read leases end when its connection closes).
 *
 * Transfer: the copy ops are grouped by payload object and handed to a small
 * pool of threads, one object at a time per thread. For each object the
 * chunks (WC_CHECK_CHUNK bytes) its ops touch are walked in order; each
 * chunk is scattered and verified in one pass (scatter_fused: a block
 * copied, then hashed while in cache, so the source is read from memory
 * once) and compared with the manifest's XXH3-64 before the next chunk is
 * touched, so an altered payload fails with WEIGHT_EDIGEST_MISMATCH naming
 * the object and chunk (the buffers then hold that chunk's unverified
 * bytes: a failed get's buffers are not to be used). The
 * source of a chunk is, in order of preference: the node's segment file
 * mapped into this process (co-located, HOT: memcpy straight from the
 * mapping, no staging; the mapping is made once per store, and each of its
 * pages is walked into the page tables once per mapping, not per get:
 * seg_map_prefault), a ranged TCP
 * read from the node's data server into a per-thread window, or a cold
 * replica's file, read through the node that holds it. When a memory
 * replica fails a read or a chunk's checksum and the object also has a
 * complete cold replica (a revision brought back from COLD keeps it), the
 * rest of the object, that chunk first, is read from the cold file instead;
 * only without one is the error returned. A node's read needs the READ
 * ticket the master minted with the replica, valid for node.ticket_ttl_ms:
 * a load that outlives it (a big object over a slow link) is refused with
 * "expired" and asks the master for the object's replicas again, taking the
 * fresh ticket and going on from the window it was refused (refresh_job).
 * Strided ops (a split along an
 * inner dimension) are clipped to each chunk run by run. With
 * WEIGHT_OPT_RELEASE_PAGES the pages of each window are given back once it
 * is scattered (source and destination), so that a caller writing into
 * file mappings holds about a window per thread, not the model.
 *
 * weight_get_mapped (the last section) is the load without a transfer: it
 * keeps the lease (renewed on a connection of its own) and hands out
 * pointers into its own read-only mapping of the segment files, after
 * verifying each object whole; weight_mapped_release ends it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/sha.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "node_data_client.h"
#include "wc_digest.h"
#include "wc_plan.h"
#include "wc_store.h"
#include "wc_xxh3.h"

#define M(name) WMRPC__WEIGHT_METHOD__WEIGHT_##name
#define WC_REMOTE_WINDOW_CHUNKS 8
/* Chunks of an object read through a mapping that one job takes at most
 * (split_mapped_jobs): the transfer threads take jobs one at a time, so the
 * last job bounds how long one thread works on while the others are done. */
#define WC_MAPPED_JOB_CHUNKS 16
/* Bytes of a chunk copied, then hashed, at a time (scatter_fused): small
 * enough to be still in the core's cache when hashed. */
#define WC_FUSE_BLOCK (64u << 10)
/* Fresh READ tickets one object may ask for (refresh_job): with the default
 * node.ticket_ttl_ms of 60 s, an hour of reading one object. */
#define WC_TICKET_REFRESH_MAX 64

/* -- the lease and its renewal ------------------------------------------------ */

typedef struct lease_keeper {
    weight_store *s;
    weight_identity id;
    uint64_t lease_id;
    uint64_t lease_gen;       /* the generation it was granted at: the renewal's fence */
    uint64_t interval_ms;
    pthread_t thread;
    int running;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop;
    atomic_int lost;          /* 0, or the code a renewal failed with */
    char lost_msg[1200];
} lease_keeper;

static int lease_call(weight_store *s, rpcc_conn **conn, uint32_t method, const weight_identity *id,
                      uint64_t lease_id, uint64_t lease_gen, uint64_t ttl_ms,
                      Wmrpc__LeaseResponse **resp)
{
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    Wmrpc__WeightIdentity wid;
    char tenant[WEIGHT_ID_MAX + 1];
    wc_wire_identity(s, id, &wid, tenant);
    req.identity = &wid;
    req.lease_id = lease_id;
    req.metadata_generation = lease_gen;
    req.ttl_ms = ttl_ms;
    const ProtobufCMessageDescriptor *desc = resp ? &wmrpc__lease_response__descriptor : NULL;
    if (method == M(LEASE_ACQUIRE)) /* BUSY: wait out the metadata change in flight */
        return wc_call_patient(s, conn, method, &req.base, desc, (ProtobufCMessage **)resp);
    return wc_call(s, conn, method, &req.base, desc, (ProtobufCMessage **)resp);
}

/* The renew thread: renew every interval until told to stop; a failed
 * renewal that the master answered (the lease is gone) marks the keeper
 * lost, which stops the transfer. Transport hiccups are retried. */
static void *renew_main(void *arg)
{
    lease_keeper *k = arg;
    /* The thread's own error buffer: wc_call writes into a store's err. */
    weight_store shadow;
    memset(&shadow, 0, sizeof shadow);
    snprintf(shadow.master, sizeof shadow.master, "%s", k->s->master);
    snprintf(shadow.tenant, sizeof shadow.tenant, "%s", k->s->tenant);
    pthread_mutex_lock(&k->lock);
    while (!k->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (k->interval_ms % 1000) * 1000000ull;
        ts.tv_sec += (time_t)(k->interval_ms / 1000 + ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        int w = pthread_cond_timedwait(&k->cond, &k->lock, &ts);
        if (k->stop) break;
        if (w != ETIMEDOUT) continue;
        pthread_mutex_unlock(&k->lock);
        int rc = lease_call(&shadow, &k->s->renew_rpc, M(LEASE_RENEW), &k->id, k->lease_id,
                            k->lease_gen, k->s->lease_ttl_ms, NULL);
        pthread_mutex_lock(&k->lock);
        if (rc < 0 && rc != WEIGHT_EIO && rc != WEIGHT_EAGAIN) {
            snprintf(k->lost_msg, sizeof k->lost_msg, "lease renewal: %s", shadow.err);
            atomic_store(&k->lost, rc == WEIGHT_ENOT_FOUND ? WEIGHT_ELEASE_EXPIRED : rc);
            break;
        }
    }
    pthread_mutex_unlock(&k->lock);
    return NULL;
}

/* How often to renew a lease that expires at expires_ms (wall clock): a
 * third of what is left of its TTL, at least every 50 ms. */
static uint64_t lease_renew_interval(const weight_store *s, uint64_t expires_ms)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t wall = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
    uint64_t ttl = expires_ms > wall ? expires_ms - wall : 0;
    if (ttl == 0) ttl = s->lease_ttl_ms ? s->lease_ttl_ms : 30000;
    return ttl / 3 > 50 ? ttl / 3 : 50;
}

static void keeper_stop(lease_keeper *k)
{
    if (!k->running) return;
    pthread_mutex_lock(&k->lock);
    k->stop = 1;
    pthread_cond_signal(&k->cond);
    pthread_mutex_unlock(&k->lock);
    pthread_join(k->thread, NULL);
    k->running = 0;
}

/* -- the transfer --------------------------------------------------------------- */

typedef enum src_kind { SRC_MAPPED = 1, SRC_REMOTE = 2, SRC_COLD = 3 } src_kind;

/* Chunks [c0, c1) of one payload object to read: where from, and the
 * object's ops (indices into the plan, sorted by src_offset). */
typedef struct job {
    uint32_t object;
    uint64_t c0, c1;
    src_kind kind;
    const seg_map *map;          /* SRC_MAPPED */
    uint64_t base;               /* offset of the object in the segment / file */
    char segment[64];            /* SRC_REMOTE */
    char data_addr[128];         /* SRC_REMOTE, SRC_COLD */
    int data_tls;                /* its data server speaks TLS only */
    char cold_name[512];         /* SRC_COLD: the file, served by its node */
    /* A complete cold replica to read instead when the memory one fails a
     * read or a chunk's checksum ("" when there is none, or once used). */
    char alt_cold_name[512];
    char alt_data_addr[128];
    int alt_data_tls;
    uint8_t *ticket;             /* the source's READ ticket (SRC_REMOTE, SRC_COLD), malloc'd */
    size_t ticket_len;
    uint8_t *alt_ticket;         /* the cold fallback's */
    size_t alt_ticket_len;
    size_t *ops;
    size_t n_ops;
    unsigned refreshes;          /* fresh tickets asked for (refresh_job) */
    int refresh_unused;          /* 1: the last one has not read a window yet */
} job;

typedef struct xfer {
    weight_store *s;
    const wc_manifest *m;
    const wc_plan *plan;
    uint8_t *const *bindings;
    job *jobs;
    size_t n_jobs;
    size_t n_objects;             /* objects the jobs read (weight_get_stats) */
    atomic_size_t next;
    atomic_uint_fast64_t copied;
    atomic_uint_fast64_t local;
    atomic_uint_fast64_t verified;
    atomic_uint_fast64_t prefaulted; /* source bytes whose page tables were populated */
    atomic_int failed;            /* first error code */
    atomic_uint_fast64_t refreshes; /* tickets asked for again (weight_get_stats) */
    pthread_mutex_t kv_lock;      /* the store's object-service connection (refresh_job) */
    lease_keeper *keeper;
    pthread_mutex_t err_lock;
    char err[1024];
    pthread_mutex_t done_lock;
    pthread_cond_t done_cond;
    unsigned done_workers;
} xfer;

static void xfer_fail(xfer *x, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void xfer_fail(xfer *x, int rc, const char *fmt, ...)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&x->failed, &expected, rc)) return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&x->err_lock);
    vsnprintf(x->err, sizeof x->err, fmt, ap);
    pthread_mutex_unlock(&x->err_lock);
    va_end(ap);
}

/* Copy n bytes to memory the caller will not read back soon. With stream
 * (the run they belong to is large) they go with non-temporal stores (no
 * read-for-ownership of the destination, as glibc's memcpy does only for
 * copies of hundreds of MiB), and the source stays in cache for the
 * chunk's checksum that follows (scatter_fused). Small runs and non-x86
 * builds use memcpy. wc_stream_fence() orders the stores before the worker
 * reports done. */
#define WC_STREAM_MIN (64u << 10)
static void copy_stream(uint8_t *dst, const uint8_t *src, size_t n, int stream)
{
#if defined(__SSE2__)
    if (stream && n >= 64) {
        size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
        memcpy(dst, src, head);
        dst += head;
        src += head;
        n -= head;
        size_t blocks = n / 64;
        for (size_t i = 0; i < blocks; i++, dst += 64, src += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)src);
            __m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
            __m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
            _mm_stream_si128((__m128i *)dst, a);
            _mm_stream_si128((__m128i *)(dst + 16), b);
            _mm_stream_si128((__m128i *)(dst + 32), c);
            _mm_stream_si128((__m128i *)(dst + 48), d);
        }
        n -= blocks * 64;
    }
#else
    (void)stream;
#endif
    memcpy(dst, src, n);
}

static void wc_stream_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

static uint64_t op_src_end(const wc_copy_op *op)
{
    return op->src_offset + (op->count - 1) * op->src_stride + op->bytes;
}

/* Copy the parts of op that lie in object bytes [ws, we), which are at
 * `window` in memory. Returns the bytes copied. */
static uint64_t scatter(const wc_copy_op *op, uint8_t *dst, const uint8_t *window, uint64_t ws,
                        uint64_t we)
{
    uint64_t copied = 0;
    uint64_t s0 = op->src_offset;
    uint64_t k = 0;
    if (op->bytes == 0) return 0;
    if (s0 + op->bytes <= ws && op->src_stride > 0) k = (ws - (s0 + op->bytes)) / op->src_stride + 1;
    for (; k < op->count; k++) {
        uint64_t rs = s0 + k * op->src_stride;
        if (rs >= we) break;
        uint64_t re = rs + op->bytes;
        uint64_t a = rs > ws ? rs : ws;
        uint64_t b = re < we ? re : we;
        if (a >= b) continue;
        copy_stream(dst + op->dst_offset + k * op->dst_stride + (a - rs), window + (a - ws),
                    (size_t)(b - a), op->bytes >= WC_STREAM_MIN);
        copied += b - a;
    }
    return copied;
}

/* WEIGHT_OPT_RELEASE_PAGES: give back the page mappings of n bytes at p
 * (rounded out to whole pages). Only for MAP_SHARED mappings, whose bytes
 * stay in the file or segment behind them. */
static void release_range(const uint8_t *p, uint64_t n)
{
    if (n == 0) return;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
    uintptr_t b = ((uintptr_t)p + (uintptr_t)n + 4095) & ~(uintptr_t)4095;
    madvise((void *)a, b - a, MADV_DONTNEED);
}

/* After object bytes [ws, we) of j were scattered: release the window's
 * source pages (a segment mapping) and the destination runs of the ops
 * that touched it, from ops[lo] on. */
static void release_window(const xfer *x, const job *j, uint64_t ws, uint64_t we, size_t lo)
{
    wc_stream_fence(); /* the non-temporal stores are in the pages first */
    if (j->kind == SRC_MAPPED) seg_map_release(j->map, j->base + ws, we - ws);
    for (size_t i = lo; i < j->n_ops; i++) {
        const wc_copy_op *op = &x->plan->ops[j->ops[i]];
        if (op->src_offset >= we) break;
        if (op_src_end(op) <= ws || op->bytes == 0) continue;
        uint64_t kmin = 0, kmax = op->count - 1;
        if (op->src_stride > 0) {
            if (op->src_offset + op->bytes <= ws)
                kmin = (ws - (op->src_offset + op->bytes)) / op->src_stride + 1;
            uint64_t last = (we - 1 - op->src_offset) / op->src_stride;
            if (last < kmax) kmax = last;
        }
        if (kmin > kmax) continue;
        release_range(x->bindings[op->dst] + op->dst_offset + kmin * op->dst_stride,
                      (kmax - kmin) * op->dst_stride + op->bytes);
    }
}

typedef struct worker {
    xfer *x;
    uint8_t *window;              /* staging for remote and cold reads */
    uint64_t window_cap;
    XXH3_state_t *xx;             /* scatter_fused's running checksum, made on first use */
    struct { char addr[128]; ndc_conn *c; } nodes[4];
} worker;

static ndc_conn *worker_node(worker *wk, const char *addr, int tls, char *err, size_t errlen)
{
    for (int i = 0; i < 4; i++)
        if (wk->nodes[i].c && strcmp(wk->nodes[i].addr, addr) == 0) return wk->nodes[i].c;
    for (int i = 0; i < 4; i++) {
        if (wk->nodes[i].c) continue;
        ndc_options o = {.timeout_ms = 60000, .socket_buffer_bytes = 4 << 20, .tls = tls,
                         .tls_ctx = wk->x->s->tls_ctx};
        if (ndc_connect(addr, &o, &wk->nodes[i].c, err, errlen) < 0) return NULL;
        snprintf(wk->nodes[i].addr, sizeof wk->nodes[i].addr, "%s", addr);
        return wk->nodes[i].c;
    }
    snprintf(err, errlen, "too many nodes");
    return NULL;
}

/* Fetch object bytes [ws, we) of j into memory: a pointer into the mapping,
 * or into the worker's window after a read. NULL on failure, with the code
 * in *rc, the cause in err and, when the node refused the read, its status
 * in *node_rc (SMP_ESTATE: the ticket expired; left alone otherwise). */
static const uint8_t *fetch(worker *wk, const job *j, uint64_t ws, uint64_t we, int *rc,
                            int *node_rc, char *err, size_t errlen)
{
    const char *key = wk->x->m->objects[j->object].key;
    char cause[512];
    if (j->kind == SRC_MAPPED) return j->map->base + j->base + ws;
    if (we - ws > wk->window_cap) {
        uint8_t *nw = realloc(wk->window, we - ws);
        if (nw == NULL) {
            *rc = WEIGHT_ENOMEM;
            snprintf(err, errlen, "cannot stage %" PRIu64 " bytes", we - ws);
            return NULL;
        }
        wk->window = nw;
        wk->window_cap = we - ws;
    }
    ndc_conn *c = worker_node(wk, j->data_addr, j->data_tls, cause, sizeof cause);
    if (c == NULL) {
        *rc = WEIGHT_EIO;
        snprintf(err, errlen, "%s: node %s: %s", key, j->data_addr, cause);
        return NULL;
    }
    int r = j->kind == SRC_REMOTE
                ? ndc_read(c, j->segment, j->base + ws, we - ws, wk->window, j->ticket, j->ticket_len)
                : ndc_read_cold(c, j->cold_name, ws, we - ws, wk->window, j->ticket, j->ticket_len);
    if (r < 0) {
        *rc = WEIGHT_EIO;
        *node_rc = r; /* a refusal (the connection stays usable) or a transport code */
        snprintf(err, errlen, "%s: reading from node %s: %s", key, j->data_addr,
                 ndc_last_error(c));
        return NULL;
    }
    return wk->window;
}

/* Switch j to its cold replica after its memory one failed. 1 when there
 * was one to switch to (the failed window is read again from it). */
static int use_cold_instead(job *j)
{
    if (j->kind == SRC_COLD || j->alt_cold_name[0] == '\0') return 0;
    j->kind = SRC_COLD;
    j->base = 0;
    snprintf(j->cold_name, sizeof j->cold_name, "%s", j->alt_cold_name);
    snprintf(j->data_addr, sizeof j->data_addr, "%s", j->alt_data_addr);
    j->data_tls = j->alt_data_tls;
    j->alt_cold_name[0] = '\0';
    free(j->ticket);
    j->ticket = j->alt_ticket;
    j->ticket_len = j->alt_ticket_len;
    j->alt_ticket = NULL;
    j->alt_ticket_len = 0;
    return 1;
}

/* Scatter the ops of j from ops[lo] on that lie in object bytes [a, b),
 * which are at `src` in memory. Returns the bytes copied. */
static uint64_t scatter_range(const worker *wk, const job *j, size_t lo, const uint8_t *src,
                              uint64_t a, uint64_t b)
{
    const xfer *x = wk->x;
    uint64_t copied = 0;
    for (size_t i = lo; i < j->n_ops; i++) {
        const wc_copy_op *op = &x->plan->ops[j->ops[i]];
        if (op->src_offset >= b) break;
        if (op_src_end(op) <= a) continue;
        copied += scatter(op, x->bindings[op->dst], src, a, b);
    }
    return copied;
}

/* Verify and scatter object bytes [ws, we) of j (whole chunks, at win in
 * memory) in one pass: each chunk is walked in blocks of WC_FUSE_BLOCK,
 * each block's ops copied, then the block folded into the chunk's XXH3-64
 * while it is still in cache, so the source is read from memory once (a
 * separate verify pass would read every chunk twice). A chunk is compared
 * with the manifest's sum before the next is touched. On a mismatch the
 * bytes of that chunk were already written to the buffers: the get fails,
 * and the caller must not use them (weightclient.h). Sets *copied (0 on
 * failure); WEIGHT_OK, WEIGHT_EDIGEST_MISMATCH or WEIGHT_ENOMEM, cause in
 * err. */
static int scatter_fused(worker *wk, const job *j, size_t lo, const uint8_t *win, uint64_t ws,
                         uint64_t we, uint64_t *copied, char *err, size_t errlen)
{
    const wc_object *o = &wk->x->m->objects[j->object];
    uint64_t chunk = o->chunk_bytes, done = 0;
    *copied = 0;
    if (wk->xx == NULL && (wk->xx = XXH3_createState()) == NULL) {
        snprintf(err, errlen, "out of memory");
        return WEIGHT_ENOMEM;
    }
    for (uint64_t a = ws; a < we; a += chunk) {
        uint64_t b = a + chunk < we ? a + chunk : we, v = a / chunk;
        XXH3_64bits_reset(wk->xx);
        for (uint64_t bs = a; bs < b; bs += WC_FUSE_BLOCK) {
            uint64_t be = bs + WC_FUSE_BLOCK < b ? bs + WC_FUSE_BLOCK : b;
            done += scatter_range(wk, j, lo, win + (bs - ws), bs, be);
            XXH3_64bits_update(wk->xx, win + (bs - ws), (size_t)(be - bs));
        }
        if (XXH3_64bits_digest(wk->xx) != o->chunk_xxh3[v]) {
            snprintf(err, errlen, "payload %s: bytes [%" PRIu64 ", %" PRIu64 ") do not match the "
                     "manifest's checksum (chunk %" PRIu64 "); the get fails and the buffers "
                     "hold unverified bytes of that chunk", o->key, a, b, v);
            return WEIGHT_EDIGEST_MISMATCH;
        }
    }
    *copied = done;
    return WEIGHT_OK;
}

/* An object without chunk sums (one SHA-256 over it, read as one chunk):
 * verify [ws, we), then scatter it; nothing is written on a mismatch. Same
 * contract as scatter_fused otherwise. */
static int scatter_sha256(worker *wk, const job *j, size_t lo, const uint8_t *win, uint64_t ws,
                          uint64_t we, uint64_t *copied, char *err, size_t errlen)
{
    const wc_object *o = &wk->x->m->objects[j->object];
    uint8_t sha[32];
    *copied = 0;
    SHA256(win, (size_t)(we - ws), sha);
    if (o->has_sha256 && memcmp(sha, o->sha256, 32) != 0) {
        snprintf(err, errlen, "payload %s: bytes [%" PRIu64 ", %" PRIu64 ") do not match the "
                 "manifest's checksum (chunk 0); nothing of that chunk was written", o->key, ws,
                 we);
        return WEIGHT_EDIGEST_MISMATCH;
    }
    *copied = scatter_range(wk, j, lo, win, ws, we);
    return WEIGHT_OK;
}

static int refresh_job(xfer *x, job *j, char *err, size_t errlen);

/* The chunks of an object read as one (an object without chunk sums is
 * one chunk), and their size. */
static uint64_t object_chunks(const wc_object *o, uint64_t *chunk)
{
    *chunk = o->n_chunks ? o->chunk_bytes : o->bytes;
    return o->n_chunks ? o->n_chunks : 1;
}

/* Mark in need[] (indexed from chunk c0) the chunks in [c0, c1) that op's
 * runs touch; only the runs that lie in those chunks are visited. */
static void mark_needed(const wc_copy_op *op, uint64_t chunk, uint64_t c0, uint64_t c1,
                        uint8_t *need)
{
    uint64_t ps = c0 * chunk, pe = c1 * chunk, kmin = 0, kmax = op->count - 1;
    if (op->bytes == 0 || op->count == 0 || op->src_offset >= pe || op_src_end(op) <= ps) return;
    if (op->src_stride > 0) {
        if (op->src_offset + op->bytes <= ps)
            kmin = (ps - (op->src_offset + op->bytes)) / op->src_stride + 1;
        uint64_t last = (pe - 1 - op->src_offset) / op->src_stride;
        if (last < kmax) kmax = last;
    }
    for (uint64_t k = kmin; k <= kmax; k++) {
        uint64_t rs = op->src_offset + k * op->src_stride;
        uint64_t a = rs / chunk, b = (rs + op->bytes - 1) / chunk + 1;
        for (uint64_t c = a > c0 ? a : c0; c < b && c < c1; c++) need[c - c0] = 1;
    }
}

/* Read, verify and scatter chunks [j->c0, j->c1) of one object. */
static void run_job(worker *wk, job *j)
{
    xfer *x = wk->x;
    const wc_object *o = &x->m->objects[j->object];
    const wc_plan *plan = x->plan;
    uint64_t chunk;
    uint64_t n_chunks = object_chunks(o, &chunk);
    if (o->bytes == 0 || chunk == 0) return; /* nothing can be read from it */
    if (j->c1 > n_chunks) j->c1 = n_chunks;
    if (j->c0 >= j->c1) return;
    uint8_t *need = calloc(j->c1 - j->c0, 1);
    if (need == NULL) {
        xfer_fail(x, WEIGHT_ENOMEM, "out of memory");
        return;
    }
    /* Mark the chunks the ops touch (need[c - j->c0]). */
    for (size_t i = 0; i < j->n_ops; i++)
        mark_needed(&plan->ops[j->ops[i]], chunk, j->c0, j->c1, need);
    if (j->kind == SRC_MAPPED && !x->s->release_pages) {
        /* Prefault the page tables of each run of needed chunks in one call
         * (not one fault per page), and only of what is read; pages the
         * store's mapping made present on an earlier get are not walked
         * again. */
        for (uint64_t c = j->c0; c < j->c1;) {
            if (!need[c - j->c0]) {
                c++;
                continue;
            }
            uint64_t e = c;
            while (e < j->c1 && need[e - j->c0]) e++;
            uint64_t a = c * chunk, b = e * chunk < o->bytes ? e * chunk : o->bytes;
            atomic_fetch_add(&x->prefaulted, seg_map_prefault(j->map, j->base + a, b - a));
            c = e;
        }
    }
    size_t lo = 0;
    for (uint64_t c = j->c0; c < j->c1 && atomic_load(&x->failed) == 0;) {
        if (!need[c - j->c0]) {
            c++;
            continue;
        }
        uint64_t window_chunks = j->kind == SRC_MAPPED ? 1 : WC_REMOTE_WINDOW_CHUNKS;
        uint64_t c_end = c + 1;
        while (c_end < j->c1 && need[c_end - j->c0] && c_end - c < window_chunks) c_end++;
        uint64_t ws = c * chunk;
        uint64_t we = c_end * chunk < o->bytes ? c_end * chunk : o->bytes;
        if (atomic_load(&x->s->cancel)) {
            xfer_fail(x, WEIGHT_ECANCELED, "weight_get canceled");
            break;
        }
        if (x->keeper && atomic_load(&x->keeper->lost)) {
            xfer_fail(x, atomic_load(&x->keeper->lost), "%s", x->keeper->lost_msg);
            break;
        }
        int frc = 0, node_rc = 0;
        char ferr[768];
        const uint8_t *win = fetch(wk, j, ws, we, &frc, &node_rc, ferr, sizeof ferr);
        if (win == NULL && node_rc == SMP_ESTATE) {
            /* the READ ticket expired: only this refusal asks for a fresh one */
            int rrc = refresh_job(x, j, ferr, sizeof ferr);
            if (rrc == WEIGHT_OK) continue; /* the same window, with the fresh ticket */
            frc = rrc;
        }
        uint64_t copied = 0;
        if (win != NULL) {
            while (lo < j->n_ops && op_src_end(&plan->ops[j->ops[lo]]) <= ws) lo++;
            frc = o->n_chunks ? scatter_fused(wk, j, lo, win, ws, we, &copied, ferr, sizeof ferr)
                              : scatter_sha256(wk, j, lo, win, ws, we, &copied, ferr, sizeof ferr);
        }
        if (frc != 0) {
            if (frc != WEIGHT_ENOMEM && use_cold_instead(j)) continue; /* same window, cold */
            xfer_fail(x, frc, "%s", ferr);
            break;
        }
        j->refresh_unused = 0;
        atomic_fetch_add(&x->verified, we - ws);
        if (x->s->release_pages) release_window(x, j, ws, we, lo);
        atomic_fetch_add(&x->copied, copied);
        if (j->kind == SRC_MAPPED) atomic_fetch_add(&x->local, copied);
        c = c_end;
    }
    wc_stream_fence();
    free(need);
}

static void *worker_main(void *arg)
{
    worker *wk = arg;
    xfer *x = wk->x;
    for (;;) {
        size_t i = atomic_fetch_add(&x->next, 1);
        if (i >= x->n_jobs || atomic_load(&x->failed)) break;
        run_job(wk, &x->jobs[i]);
    }
    pthread_mutex_lock(&x->done_lock);
    x->done_workers++;
    pthread_cond_signal(&x->done_cond);
    pthread_mutex_unlock(&x->done_lock);
    return NULL;
}

/* kvc_get, once more on a new connection when the first one was lost (a
 * master restart): a replica lookup may be repeated. */
static int kv_get(weight_store *s, const char *key, kvc_object *obj)
{
    int rc = kvc_get(s->kv, key, obj);
    if (rc < 0 && kvc_transport_failed(s->kv) && wc_kv_reconnect(s) == SMP_OK)
        rc = kvc_get(s->kv, key, obj);
    return rc;
}

static const wc_plan *g_sort_plan; /* qsort has no context argument */
static int cmp_op_src(const void *a, const void *b)
{
    const wc_copy_op *x = &g_sort_plan->ops[*(const size_t *)a];
    const wc_copy_op *y = &g_sort_plan->ops[*(const size_t *)b];
    if (x->object != y->object) return x->object < y->object ? -1 : 1;
    if (x->src_offset != y->src_offset) return x->src_offset < y->src_offset ? -1 : 1;
    return 0;
}
static pthread_mutex_t g_sort_lock = PTHREAD_MUTEX_INITIALIZER;

/* A malloc'd copy of r's ticket into *out (NULL and 0 when it has none).
 * 0 or -1 (out of memory). */
static int copy_ticket(const kvc_replica *r, uint8_t **out, size_t *len)
{
    free(*out);
    *out = NULL;
    *len = 0;
    if (r->ticket_len == 0) return 0;
    if ((*out = malloc(r->ticket_len)) == NULL) return -1;
    memcpy(*out, r->ticket, r->ticket_len);
    *len = r->ticket_len;
    return 0;
}

/* The node refused a read of j as expired: its READ ticket outlived
 * node.ticket_ttl_ms (a load slower than the TTL: a big object over a slow
 * link, or a reader that takes its windows slowly). Ask the master for the
 * object's replicas again -- each comes with a fresh ticket -- and point j
 * at a source of the same kind: the same one while it is listed, else
 * another replica of the object (every chunk is verified against the
 * manifest, so the rest may come from any copy of the same object). The
 * caller reads the refused window again: no byte already read is read
 * twice. The lease is not touched: the renew thread keeps it meanwhile.
 *
 * Reactive, not proactive: a ticket is opaque to the client and its expiry
 * is judged by the node's clock, so only the node's refusal says it is over
 * (a countdown on the client's clock would be off by the skew between
 * master, node and client); the price is one refused request per TTL per
 * object read.
 *
 * Bounded: at most WC_TICKET_REFRESH_MAX per object, and a fresh ticket
 * refused as expired before it read one window is not refreshed again (the
 * master's and the node's clocks are further apart than the TTL). Only an
 * expiry comes here: a forged ticket, a wrong range or any other refusal
 * fails the read as before. The lookup takes x->kv_lock (the workers share
 * the store's object-service connection). WEIGHT_OK, or an error with the
 * cause in err and j unchanged. */
static int refresh_job(xfer *x, job *j, char *err, size_t errlen)
{
    const wc_object *o = &x->m->objects[j->object];
    const char *what = j->kind == SRC_COLD ? "cold" : "memory";
    kvc_object obj;
    char cause[512] = "";
    if (j->refresh_unused) {
        snprintf(err, errlen, "%s: the fresh read ticket was refused as expired too by node %s "
                 "(are the master's and the node's clocks more than node.ticket_ttl_ms apart?)",
                 o->key, j->data_addr);
        return WEIGHT_EIO;
    }
    if (j->refreshes >= WC_TICKET_REFRESH_MAX) {
        snprintf(err, errlen, "%s: the read ticket expired again after %u fresh ones", o->key,
                 j->refreshes);
        return WEIGHT_EIO;
    }
    pthread_mutex_lock(&x->kv_lock);
    int rc = kv_get(x->s, o->key, &obj);
    if (rc < 0) snprintf(cause, sizeof cause, "%s", kvc_error(x->s->kv));
    pthread_mutex_unlock(&x->kv_lock);
    if (rc < 0) {
        snprintf(err, errlen, "%s: asking the master for a fresh read ticket: %s", o->key, cause);
        return rc == SMP_ENOTFOUND || rc == SMP_EAGAIN ? WEIGHT_ENOT_READY : WEIGHT_EIO;
    }
    if (obj.size != o->bytes || (o->has_sha256 && memcmp(obj.sha256, o->sha256, 32) != 0)) {
        snprintf(err, errlen, "payload %s in the store is no longer the object the manifest "
                 "describes", o->key);
        return WEIGHT_EDIGEST_MISMATCH;
    }
    const kvc_replica *pick = NULL, *alt = NULL;
    for (size_t r = 0; r < obj.n_replicas; r++) {
        const kvc_replica *rep = &obj.replicas[r];
        int cold = rep->kind == SMP_REPLICA_COLD && rep->status == KVC_REPLICA_COMPLETE &&
                   rep->path[0] && rep->data_addr[0];
        if (cold && j->alt_cold_name[0] && strcmp(rep->path, j->alt_cold_name) == 0) alt = rep;
        if (j->kind == SRC_COLD ? !cold : rep->kind != SMP_REPLICA_MEMORY || !rep->data_addr[0])
            continue;
        int same = strcmp(rep->data_addr, j->data_addr) == 0 &&
                   (j->kind == SRC_COLD ? strcmp(rep->path, j->cold_name) == 0
                                        : strcmp(rep->segment, j->segment) == 0 &&
                                              rep->offset == j->base);
        if (pick == NULL || same) pick = rep;
        if (same) break;
    }
    if (pick == NULL) {
        snprintf(err, errlen, "%s: its read ticket expired and the master lists no %s replica "
                 "to go on from", o->key, what);
        return WEIGHT_ENOT_READY;
    }
    uint8_t *ticket = NULL, *alt_ticket = NULL;
    size_t ticket_len = 0, alt_len = 0;
    if (copy_ticket(pick, &ticket, &ticket_len) < 0 ||
        (alt != NULL && copy_ticket(alt, &alt_ticket, &alt_len) < 0)) {
        free(ticket);
        snprintf(err, errlen, "out of memory");
        return WEIGHT_ENOMEM;
    }
    free(j->ticket);
    j->ticket = ticket;
    j->ticket_len = ticket_len;
    if (alt != NULL) {
        free(j->alt_ticket);
        j->alt_ticket = alt_ticket;
        j->alt_ticket_len = alt_len;
    }
    snprintf(j->data_addr, sizeof j->data_addr, "%s", pick->data_addr);
    j->data_tls = pick->data_tls;
    if (j->kind == SRC_COLD) {
        snprintf(j->cold_name, sizeof j->cold_name, "%s", pick->path);
    } else {
        snprintf(j->segment, sizeof j->segment, "%s", pick->segment);
        j->base = pick->offset;
    }
    j->refreshes++;
    j->refresh_unused = 1;
    atomic_fetch_add(&x->refreshes, 1);
    return WEIGHT_OK;
}

/* Group the plan's ops by object into jobs and pick each object's source.
 * The replica lookups are the store's object service (this thread). */
static int build_jobs(weight_store *s, xfer *x, size_t **op_order)
{
    const wc_plan *plan = x->plan;
    const wc_manifest *m = x->m;
    size_t *order = malloc((plan->n_ops ? plan->n_ops : 1) * sizeof *order);
    if (order == NULL) return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
    *op_order = order;
    for (size_t i = 0; i < plan->n_ops; i++) order[i] = i;
    pthread_mutex_lock(&g_sort_lock);
    g_sort_plan = plan;
    qsort(order, plan->n_ops, sizeof *order, cmp_op_src);
    pthread_mutex_unlock(&g_sort_lock);
    size_t n_jobs = 0;
    for (size_t i = 0; i < plan->n_ops; i++)
        if (i == 0 || plan->ops[order[i]].object != plan->ops[order[i - 1]].object) n_jobs++;
    x->jobs = calloc(n_jobs ? n_jobs : 1, sizeof *x->jobs);
    if (x->jobs == NULL) return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
    for (size_t i = 0; i < plan->n_ops;) {
        job *j = &x->jobs[x->n_jobs++];
        size_t e = i;
        while (e < plan->n_ops && plan->ops[order[e]].object == plan->ops[order[i]].object) e++;
        j->object = plan->ops[order[i]].object;
        j->ops = &order[i];
        j->n_ops = e - i;
        i = e;
        const wc_object *o = &m->objects[j->object];
        uint64_t chunk;
        j->c1 = object_chunks(o, &chunk);
        kvc_object obj;
        int rc = kv_get(s, o->key, &obj);
        if (rc == SMP_ENOTFOUND)
            return wc_fail(s, WEIGHT_ENOT_READY, "payload %s is missing from the store", o->key);
        if (rc < 0) return wc_fail(s, rc, "payload %s: %s", o->key, kvc_error(s->kv));
        if (obj.size != o->bytes || (o->has_sha256 && memcmp(obj.sha256, o->sha256, 32) != 0))
            return wc_fail(s, WEIGHT_EDIGEST_MISMATCH, "payload %s in the store (%" PRIu64
                           " bytes) is not the object the manifest describes", o->key, obj.size);
        /* Prefer a mapped memory replica, then a remote one, then a cold
         * file served by its node (a COLD revision is read from the cold
         * tier without a memory copy); a cold replica next to a memory one
         * is kept as the fallback. */
        const kvc_replica *remote = NULL, *cold = NULL;
        for (size_t r = 0; r < obj.n_replicas; r++) {
            const kvc_replica *rep = &obj.replicas[r];
            if (rep->kind == SMP_REPLICA_MEMORY && j->kind == 0) {
                const seg_map *map = s->transport == 2 ? NULL : wc_seg_get(s, rep, 0);
                if (map != NULL && rep->offset <= map->size && o->bytes <= map->size - rep->offset) {
                    j->kind = SRC_MAPPED;
                    j->map = map;
                    j->base = rep->offset;
                } else if (remote == NULL && rep->data_addr[0]) {
                    remote = rep;
                }
            } else if (rep->kind == SMP_REPLICA_COLD && cold == NULL && rep->path[0] &&
                       rep->data_addr[0] && rep->status == KVC_REPLICA_COMPLETE) {
                cold = rep;
            }
        }
        if (j->kind == 0 && remote != NULL && s->transport != 1) {
            j->kind = SRC_REMOTE;
            j->base = remote->offset;
            if (copy_ticket(remote, &j->ticket, &j->ticket_len) < 0)
                return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
            snprintf(j->segment, sizeof j->segment, "%s", remote->segment);
            snprintf(j->data_addr, sizeof j->data_addr, "%s", remote->data_addr);
            j->data_tls = remote->data_tls;
        } else if (j->kind == 0 && cold != NULL && s->transport != 1) {
            j->kind = SRC_COLD;
            j->base = 0;
            snprintf(j->cold_name, sizeof j->cold_name, "%s", cold->path);
            snprintf(j->data_addr, sizeof j->data_addr, "%s", cold->data_addr);
            j->data_tls = cold->data_tls;
            if (copy_ticket(cold, &j->ticket, &j->ticket_len) < 0)
                return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
        }
        if (j->kind == 0)
            return wc_fail(s, WEIGHT_ENOT_READY, "payload %s has no replica this client can read",
                           o->key);
        if (j->kind != SRC_COLD && cold != NULL && s->transport != 1) {
            snprintf(j->alt_cold_name, sizeof j->alt_cold_name, "%s", cold->path);
            snprintf(j->alt_data_addr, sizeof j->alt_data_addr, "%s", cold->data_addr);
            j->alt_data_tls = cold->data_tls;
            if (copy_ticket(cold, &j->alt_ticket, &j->alt_ticket_len) < 0)
                return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
        }
    }
    return WEIGHT_OK;
}

/* A malloc'd copy of len bytes at p into *out (NULL for none). 0 or -1. */
static int dup_bytes(const uint8_t *p, size_t len, uint8_t **out)
{
    *out = NULL;
    if (p == NULL || len == 0) return 0;
    if ((*out = malloc(len)) == NULL) return -1;
    memcpy(*out, p, len);
    return 0;
}

/* The jobs split_mapped_jobs cuts j into. */
static size_t job_parts(const job *j)
{
    if (j->kind != SRC_MAPPED || j->c1 <= j->c0) return 1;
    return (size_t)((j->c1 - j->c0 + WC_MAPPED_JOB_CHUNKS - 1) / WC_MAPPED_JOB_CHUNKS);
}

/* Cut each job that reads through a mapping into jobs of at most
 * WC_MAPPED_JOB_CHUNKS chunks, so the transfer threads end within a short
 * job of each other instead of one thread copying the rest of a large
 * object alone. Each part is a job of its own, with its own copies of the
 * tickets (it may fall back to the object's cold replica alone); parts end
 * on chunk boundaries, so every chunk is still verified whole by one
 * thread. Remote and cold jobs stay whole (they read in windows over one
 * connection per thread). x->n_objects counts the objects before the cut.
 * WEIGHT_OK, or WEIGHT_ENOMEM with x unchanged. */
static int split_mapped_jobs(weight_store *s, xfer *x)
{
    size_t n = 0, k = 0;
    x->n_objects = x->n_jobs;
    for (size_t i = 0; i < x->n_jobs; i++) n += job_parts(&x->jobs[i]);
    if (n == x->n_jobs) return WEIGHT_OK;
    job *parts = calloc(n, sizeof *parts);
    if (parts == NULL) return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
    for (size_t i = 0; i < x->n_jobs; i++) {
        const job *j = &x->jobs[i];
        size_t np = job_parts(j);
        for (size_t q = 0; q < np; q++) {
            job *p = &parts[k++];
            *p = *j;
            p->ticket = p->alt_ticket = NULL;
            if (np > 1) {
                p->c0 = j->c0 + q * WC_MAPPED_JOB_CHUNKS;
                p->c1 = p->c0 + WC_MAPPED_JOB_CHUNKS < j->c1 ? p->c0 + WC_MAPPED_JOB_CHUNKS : j->c1;
            }
            if (dup_bytes(j->ticket, j->ticket_len, &p->ticket) < 0 ||
                dup_bytes(j->alt_ticket, j->alt_ticket_len, &p->alt_ticket) < 0)
                goto free_parts;
        }
    }
    for (size_t i = 0; i < x->n_jobs; i++) {
        free(x->jobs[i].ticket);
        free(x->jobs[i].alt_ticket);
    }
    free(x->jobs);
    x->jobs = parts;
    x->n_jobs = k;
    return WEIGHT_OK;
free_parts:
    for (size_t i = 0; i < k; i++) {
        free(parts[i].ticket);
        free(parts[i].alt_ticket);
    }
    free(parts);
    return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
}

void weight_store_cancel(weight_store *s)
{
    if (s != NULL) atomic_store(&s->cancel, 1);
}

/* -- placement and bindings ------------------------------------------------------ */

static void tensor_info(const wc_manifest *m, size_t i, weight_tensor_info *ti)
{
    const wc_tensor *t = &m->tensors[i];
    ti->name = t->name;
    ti->dtype = wc_dtype_name(t->dtype);
    ti->item_size = t->item_size;
    ti->ndim = t->ndim;
    ti->shape = t->shape;
    ti->alias_of = t->storage != i ? m->tensors[t->storage].name : NULL;
    ti->attachment = t->attachment;
}

static const weight_binding *find_binding(const weight_bindings *b, const char *name)
{
    for (size_t i = 0; b && i < b->n_buffers; i++)
        if (b->buffers[i].name && strcmp(b->buffers[i].name, name) == 0) return &b->buffers[i];
    return NULL;
}

/* Hand the file metadata to its callback, ask for the placements and
 * bindings, build the plan. */
static int place_and_bind(weight_store *s, const wc_manifest *m, const weight_placement *placement,
                          const weight_bindings *bindings, wc_placement *pl, uint8_t **bufs,
                          wc_plan *plan, uint64_t *n_placed)
{
    char err[512] = "";
    int rc;
    *n_placed = 0;
    for (size_t i = 0; s->file_meta && i < m->n_file_meta; i++) {
        rc = s->file_meta(s->file_meta_ctx, m->file_meta[i].key, m->file_meta[i].value);
        if (rc < 0) return wc_fail(s, rc, "file metadata '%s' refused (%s)", m->file_meta[i].key,
                                   weight_error_name(rc));
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        weight_tensor_info ti;
        weight_tensor_place tp = {WEIGHT_PLACE_REPLICATED, 0, 1, 0};
        tensor_info(m, i, &ti);
        if (ti.attachment && !s->attachments) {
            tp.kind = WEIGHT_PLACE_SKIP; /* not asked for */
        } else if (placement && placement->place) {
            rc = placement->place(placement->ctx, &ti, &tp);
            if (rc < 0) return wc_fail(s, rc, "placement of '%s' refused (%s)", ti.name,
                                       weight_error_name(rc));
        }
        if (tp.kind != WEIGHT_PLACE_SKIP && tp.kind != WEIGHT_PLACE_REPLICATED &&
            tp.kind != WEIGHT_PLACE_SPLIT)
            return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "tensor '%s': unknown placement kind %d",
                           ti.name, (int)tp.kind);
        pl[i].kind = (wc_place_kind)tp.kind;
        pl[i].dim = tp.dim;
        pl[i].parts = tp.parts;
        pl[i].rank = tp.rank;
    }
    if ((rc = wc_plan_build(m, pl, plan, err, sizeof err)) < 0)
        return wc_fail(s, rc == SMP_ENOMEM ? WEIGHT_ENOMEM : WEIGHT_EINVALID_ARGUMENT, "%s", err);
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (pl[i].kind == WC_PLACE_SKIP) continue;
        (*n_placed)++;
        weight_tensor_info ti;
        weight_tensor_place tp = {(weight_place_kind)pl[i].kind, pl[i].dim, pl[i].parts, pl[i].rank};
        uint64_t shape[WC_MAX_NDIM], bytes = plan->dst_bytes[i];
        tensor_info(m, i, &ti);
        wc_plan_dst_shape(&m->tensors[i], &pl[i], shape, NULL);
        const weight_binding *b = find_binding(bindings, ti.name);
        void *buf = NULL;
        if (b != NULL) {
            if (b->bytes < bytes || (bytes > 0 && b->data == NULL))
                return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "tensor '%s': buffer of %" PRIu64
                               " bytes, the placement needs %" PRIu64, ti.name, b->bytes, bytes);
            buf = b->data;
        } else if (bindings && bindings->provide) {
            rc = bindings->provide(bindings->ctx, &ti, &tp, shape, bytes, &buf);
            if (rc < 0) return wc_fail(s, rc, "no buffer for '%s' (%s)", ti.name,
                                       weight_error_name(rc));
            if (buf == NULL && bytes > 0)
                return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "no buffer for '%s'", ti.name);
        } else {
            return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "tensor '%s' is placed but has no buffer",
                           ti.name);
        }
        bufs[i] = buf;
    }
    return WEIGHT_OK;
}

/* -- the manifest ------------------------------------------------------------------ */

/* Read and verify the manifest named by md into *m. */
static int load_manifest(weight_store *s, const weight_metadata *md, const char *tenant,
                         const weight_identity *id, wc_manifest *m)
{
    kvc_object obj;
    uint8_t *buf = NULL;
    uint64_t len = 0;
    uint8_t sha[32];
    char err[512] = "";
    int rc = kv_get(s, md->manifest_key, &obj);
    if (rc == SMP_ENOTFOUND) return wc_fail(s, WEIGHT_ENOT_READY, "manifest %s is missing", md->manifest_key);
    if (rc < 0) return wc_fail(s, rc, "manifest %s: %s", md->manifest_key, kvc_error(s->kv));
    if (obj.size == 0 || obj.size > (1ull << 31))
        return wc_fail(s, WEIGHT_EDIGEST_MISMATCH, "manifest %s has %" PRIu64 " bytes",
                       md->manifest_key, obj.size);
    if ((buf = malloc(obj.size)) == NULL) return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
    rc = kvc_get_into(s->kv, md->manifest_key, buf, obj.size, &len, 0);
    if (rc < 0) {
        rc = wc_fail(s, rc == SMP_EAGAIN ? WEIGHT_ENOT_READY : rc, "manifest %s: %s",
                     md->manifest_key, kvc_error(s->kv));
        goto free_buf;
    }
    SHA256(buf, (size_t)len, sha);
    if (memcmp(sha, md->manifest_sha256, 32) != 0) {
        rc = wc_fail(s, WEIGHT_EDIGEST_MISMATCH, "manifest %s does not match the SHA-256 sealed "
                     "at commit", md->manifest_key);
        goto free_buf;
    }
    if ((rc = wc_manifest_decode(buf, (size_t)len, m, err, sizeof err)) < 0) {
        rc = wc_fail(s, rc == SMP_ENOMEM ? WEIGHT_ENOMEM : WEIGHT_EPROTO, "manifest %s: %s",
                     md->manifest_key, err);
        goto free_buf;
    }
    if (strcmp(m->identity.tenant_id, tenant) != 0 ||
        strcmp(m->identity.namespace_id, id->namespace_id) != 0 ||
        strcmp(m->identity.resource_id, id->resource_id) != 0 ||
        strcmp(m->identity.revision, id->revision) != 0 || m->identity.generation != id->generation) {
        wc_manifest_free(m);
        rc = wc_fail(s, WEIGHT_EDIGEST_MISMATCH, "manifest %s describes another revision",
                     md->manifest_key);
    }
free_buf:
    free(buf);
    return rc;
}

/* -- weight_get ------------------------------------------------------------------- */

int weight_get(weight_store *s, const weight_identity *id, const weight_placement *placement,
               const weight_bindings *bindings, weight_get_stats *stats)
{
    lease_keeper k;
    weight_metadata md;
    wc_manifest m;
    wc_plan plan;
    xfer x;
    size_t *order = NULL;
    wc_placement *pl = NULL;
    uint8_t **bufs = NULL;
    pthread_t threads[WC_MAX_THREADS];
    worker workers[WC_MAX_THREADS];
    unsigned n_threads = 0;
    uint64_t n_placed = 0;
    char tenant[WEIGHT_ID_MAX + 1];
    char rpc_err[512];
    Wmrpc__LeaseResponse *lr = NULL;
    int rc;

    if (s == NULL) return WEIGHT_EINVALID_ARGUMENT;
    s->err[0] = '\0';
    if (stats) memset(stats, 0, sizeof *stats);
    if (id == NULL || !id->namespace_id[0] || !id->resource_id[0] || !id->revision[0])
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "weight_get: incomplete identity");
    snprintf(tenant, sizeof tenant, "%s", id->tenant_id[0] ? id->tenant_id : s->tenant);
    memset(&k, 0, sizeof k);
    memset(&m, 0, sizeof m);
    memset(&plan, 0, sizeof plan);
    memset(&x, 0, sizeof x);
    memset(workers, 0, sizeof workers);

    /* 1. The lease (its reply carries the metadata). */
    rc = lease_call(s, &s->rpc, M(LEASE_ACQUIRE), id, 0, 0, s->lease_ttl_ms, &lr);
    if (rc < 0) return rc;
    if (lr->lease == NULL || lr->lease->id == 0 || lr->metadata == NULL) {
        wmrpc__lease_response__free_unpacked(lr, NULL);
        return wc_fail(s, WEIGHT_EPROTO, "lease reply without lease or metadata");
    }
    k.s = s;
    k.id = *id;
    k.lease_id = lr->lease->id;
    k.lease_gen = lr->lease->metadata_generation;
    wc_from_wire_metadata(lr->metadata, &md);
    k.interval_ms = lease_renew_interval(s, lr->lease->expires_ms);
    wmrpc__lease_response__free_unpacked(lr, NULL);

    /* 2. The renew thread, with its own connection. */
    if (s->renew_rpc == NULL) {
        rpcc_options opt = wc_rpc_options(s);
        if (rpcc_connect(s->master, &opt, &s->renew_rpc, rpc_err, sizeof rpc_err) < 0) {
            rc = wc_fail(s, WEIGHT_EIO, "lease renewal connection: %s", rpc_err);
            goto release;
        }
    }
    pthread_mutex_init(&k.lock, NULL);
    pthread_cond_init(&k.cond, NULL);
    if (pthread_create(&k.thread, NULL, renew_main, &k) != 0) {
        rc = wc_fail(s, WEIGHT_ENOMEM, "cannot start the lease renewal thread");
        goto destroy_keeper;
    }
    k.running = 1;

    /* 3. The manifest, verified. */
    if ((rc = load_manifest(s, &md, tenant, id, &m)) < 0) goto stop_keeper;

    /* 4. Placement, bindings, plan. */
    pl = calloc(m.n_tensors ? m.n_tensors : 1, sizeof *pl);
    bufs = calloc(m.n_tensors ? m.n_tensors : 1, sizeof *bufs);
    if (pl == NULL || bufs == NULL) {
        rc = wc_fail(s, WEIGHT_ENOMEM, "out of memory");
        goto free_plan;
    }
    if ((rc = place_and_bind(s, &m, placement, bindings, pl, bufs, &plan, &n_placed)) < 0)
        goto free_plan;

    if (atomic_exchange(&s->cancel, 0)) {
        rc = wc_fail(s, WEIGHT_ECANCELED, "weight_get canceled");
        goto free_plan;
    }

    /* 5. Transfer. */
    x.s = s;
    x.m = &m;
    x.plan = &plan;
    x.bindings = bufs;
    x.keeper = &k;
    pthread_mutex_init(&x.err_lock, NULL);
    pthread_mutex_init(&x.kv_lock, NULL);
    pthread_mutex_init(&x.done_lock, NULL);
    pthread_cond_init(&x.done_cond, NULL);
    if ((rc = build_jobs(s, &x, &order)) < 0) goto free_jobs;
    if ((rc = split_mapped_jobs(s, &x)) < 0) goto free_jobs;
    n_threads = s->threads < x.n_jobs ? s->threads : (unsigned)x.n_jobs;
    wc_progress(s, 0, plan.total_bytes);
    for (unsigned t = 0; t < n_threads; t++) {
        workers[t].x = &x;
        if (pthread_create(&threads[t], NULL, worker_main, &workers[t]) != 0) {
            xfer_fail(&x, WEIGHT_ENOMEM, "cannot start transfer thread %u", t);
            n_threads = t;
            break;
        }
    }
    /* This thread reports progress until the workers are done. */
    pthread_mutex_lock(&x.done_lock);
    while (x.done_workers < n_threads) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&x.done_cond, &x.done_lock, &ts);
        if (x.done_workers < n_threads && s->progress) {
            pthread_mutex_unlock(&x.done_lock);
            wc_progress(s, atomic_load(&x.copied), plan.total_bytes);
            pthread_mutex_lock(&x.done_lock);
        }
    }
    pthread_mutex_unlock(&x.done_lock);
    for (unsigned t = 0; t < n_threads; t++) pthread_join(threads[t], NULL);
    for (unsigned t = 0; t < n_threads; t++) {
        for (int i = 0; i < 4; i++) ndc_close(workers[t].nodes[i].c);
        free(workers[t].window);
        XXH3_freeState(workers[t].xx);
    }
    rc = atomic_load(&x.failed);
    if (rc == WEIGHT_ECANCELED) atomic_store(&s->cancel, 0);
    if (rc == 0 && atomic_load(&k.lost)) {
        rc = atomic_load(&k.lost);
        wc_fail(s, rc, "%s", k.lost_msg);
    } else if (rc < 0) {
        wc_fail(s, rc, "%s", x.err);
    }
    if (rc == 0) wc_progress(s, plan.total_bytes, plan.total_bytes);
    if (stats) {
        stats->bytes = atomic_load(&x.copied);
        stats->tensors = n_placed;
        stats->objects = x.n_objects;
        stats->local_bytes = atomic_load(&x.local);
        stats->verified_bytes = atomic_load(&x.verified);
        stats->ticket_refreshes = atomic_load(&x.refreshes);
        stats->prefaulted_bytes = atomic_load(&x.prefaulted);
    }
free_jobs:
    pthread_mutex_destroy(&x.err_lock);
    pthread_mutex_destroy(&x.kv_lock);
    pthread_mutex_destroy(&x.done_lock);
    pthread_cond_destroy(&x.done_cond);
    for (size_t i = 0; i < x.n_jobs; i++) {
        free(x.jobs[i].ticket);
        free(x.jobs[i].alt_ticket);
    }
    free(x.jobs);
    free(order);
free_plan:
    free(pl);
    free(bufs);
    wc_plan_free(&plan);
    wc_manifest_free(&m);
stop_keeper:
    keeper_stop(&k);
destroy_keeper:
    pthread_cond_destroy(&k.cond);
    pthread_mutex_destroy(&k.lock);
release:
    {
        char saved[sizeof s->err];
        memcpy(saved, s->err, sizeof saved);
        /* The objects' read leases first, so that a removal waiting for the
         * revision lease finds nothing leased once that ends. A failure
         * only leaves them to expire. */
        (void)kvc_release_read_leases(s->kv, NULL);
        int rr = lease_call(s, &s->rpc, M(LEASE_RELEASE), id, k.lease_id, 0, 0, NULL);
        if (rc == 0 && rr < 0 && rr != WEIGHT_ENOT_FOUND) rc = rr; /* keep its message */
        else memcpy(s->err, saved, sizeof saved);
    }
    return rc;
}

/* -- weight_get_mapped: views in place ------------------------------------------ */

/* The read-only mappings of segment files that views point into, shared by
 * every view of the process and kept after the last one goes: mapping a
 * segment anew per view would pay a page-table fill of the whole revision
 * per load, more than the copy weight_get makes. An unreferenced mapping is
 * dropped when its file is gone or replaced (a restarted node) -- checked
 * whenever a view takes one -- or when its slot is needed. */
typedef struct shared_seg {
    char path[512];              /* seg_map_where: the file, or the node's socket */
    seg_map map;
    unsigned refs;
} shared_seg;

static pthread_mutex_t g_shared_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_seg g_shared[WC_SEG_MAPS];

/* A reference on the mapping of replica rep's segment (its file, or what
 * its dedicated node's socket hands over), mapped if no current mapping of
 * it is held. NULL when it cannot be mapped (not on this host, refused by
 * the node, or every slot is referenced). */
static shared_seg *shared_seg_acquire(const kvc_replica *rep)
{
    shared_seg *found = NULL, *slot = NULL;
    const char *path = seg_map_where(rep->segment_path, rep->local_socket);
    if (path[0] == '\0') return NULL;
    pthread_mutex_lock(&g_shared_lock);
    for (int i = 0; i < WC_SEG_MAPS; i++) {
        shared_seg *g = &g_shared[i];
        if (g->map.base == NULL) continue;
        /* a file replaced, or grown since it was mapped (a node restarted
         * with a larger segment: the new tail is past this mapping) */
        int state = seg_map_check(&g->map, g->path);
        if (g->refs == 0 && state != SEG_MAP_CURRENT) seg_map_close(&g->map);
        else if (strcmp(g->path, path) == 0 && state == SEG_MAP_CURRENT) found = g;
    }
    for (int i = 0; i < WC_SEG_MAPS && found == NULL && slot == NULL; i++)
        if (g_shared[i].map.base == NULL) slot = &g_shared[i];
    for (int i = 0; i < WC_SEG_MAPS && found == NULL && slot == NULL; i++)
        if (g_shared[i].refs == 0) {
            slot = &g_shared[i];
            seg_map_close(&slot->map);
        }
    if (found == NULL && slot != NULL &&
        seg_map_open_at(rep->segment_path, rep->local_socket, 0, 0, &slot->map, NULL, 0) == SMP_OK) {
        snprintf(slot->path, sizeof slot->path, "%s", path);
        found = slot;
    }
    if (found != NULL) found->refs++;
    pthread_mutex_unlock(&g_shared_lock);
    return found;
}

static void shared_seg_release(shared_seg *g)
{
    if (g == NULL) return;
    pthread_mutex_lock(&g_shared_lock);
    g->refs--;
    pthread_mutex_unlock(&g_shared_lock);
}

/* A payload object as a view sees it: where its memory replica on this
 * host is mapped (seg NULL: nowhere), and whether its bytes were verified. */
typedef struct mapped_object {
    shared_seg *seg;
    uint64_t offset;             /* of the object in the segment */
    int state;                   /* 0 not verified yet, 1 verified, -1 failed */
} mapped_object;

struct weight_mapped {
    /* A private store: master, tenant and lease TTL copied from the
     * caller's, its own connection for renewals and the release. */
    weight_store conn;
    weight_identity id;
    lease_keeper k;
    wc_manifest m;
    mapped_object *objs;         /* per payload object */
    pthread_mutex_t lock;        /* verification on first use */
};

/* The storage fragment of tensor i when it is the whole tensor in one
 * piece (what a view can point at), else NULL. */
static const wc_fragment *whole_fragment(const wc_manifest *m, size_t i)
{
    const wc_tensor *t = &m->tensors[m->tensors[i].storage];
    if (t->frag_count != 1 || t->bytes == 0) return NULL;
    const wc_fragment *f = &m->fragments[t->frag_first];
    return f->bytes == t->bytes ? f : NULL;
}

/* 1 when every chunk of object o at `bytes` matches the manifest. */
static int verify_object(const wc_object *o, const uint8_t *bytes)
{
    if (o->n_chunks == 0) {
        uint8_t sha[32];
        if (!o->has_sha256) return 1;
        SHA256(bytes, (size_t)o->bytes, sha);
        return memcmp(sha, o->sha256, 32) == 0;
    }
    for (size_t c = 0; c < o->n_chunks; c++) {
        uint64_t a = c * o->chunk_bytes;
        uint64_t b = a + o->chunk_bytes < o->bytes ? a + o->chunk_bytes : o->bytes;
        if (wc_xxh3(bytes + a, (size_t)(b - a)) != o->chunk_xxh3[c]) return 0;
    }
    return 1;
}

/* Find where object `index` has a memory replica this process can map, and
 * take a reference on that mapping (none found: mo->seg stays NULL). A
 * failed replica lookup other than "missing" is returned. */
static int locate_object(weight_store *s, weight_mapped *v, uint32_t index, mapped_object *mo)
{
    const wc_object *o = &v->m.objects[index];
    kvc_object obj;
    int rc = kv_get(s, o->key, &obj);
    if (rc == SMP_ENOTFOUND) return WEIGHT_OK;
    if (rc < 0) return wc_fail(s, rc, "payload %s: %s", o->key, kvc_error(s->kv));
    if (obj.size != o->bytes || (o->has_sha256 && memcmp(obj.sha256, o->sha256, 32) != 0))
        return WEIGHT_OK; /* not the manifest's object: weight_get reports it */
    for (size_t r = 0; r < obj.n_replicas && mo->seg == NULL; r++) {
        const kvc_replica *rep = &obj.replicas[r];
        if (rep->kind != SMP_REPLICA_MEMORY) continue;
        shared_seg *g = shared_seg_acquire(rep);
        if (g == NULL) continue;
        if (rep->offset > g->map.size || o->bytes > g->map.size - rep->offset) {
            shared_seg_release(g);
            continue;
        }
        mo->seg = g;
        mo->offset = rep->offset;
    }
    return WEIGHT_OK;
}

void weight_mapped_release(weight_mapped *v)
{
    if (v == NULL) return;
    if (v->k.running) keeper_stop(&v->k);
    pthread_cond_destroy(&v->k.cond);
    pthread_mutex_destroy(&v->k.lock);
    pthread_mutex_destroy(&v->lock);
    if (v->k.lease_id != 0)
        lease_call(&v->conn, &v->conn.renew_rpc, M(LEASE_RELEASE), &v->id, v->k.lease_id, 0, 0, NULL);
    for (size_t i = 0; v->objs != NULL && i < v->m.n_objects; i++) shared_seg_release(v->objs[i].seg);
    rpcc_close(v->conn.renew_rpc);
    rpcc_close(v->conn.rpc);
    free(v->objs);
    wc_manifest_free(&v->m);
    free(v);
}

int weight_get_mapped(weight_store *s, const weight_identity *id, weight_mapped **out)
{
    weight_mapped *v;
    weight_metadata md;
    Wmrpc__LeaseResponse *lr = NULL;
    char tenant[WEIGHT_ID_MAX + 1];
    char rpc_err[512];
    int rc;

    if (s == NULL) return WEIGHT_EINVALID_ARGUMENT;
    s->err[0] = '\0';
    if (out == NULL || id == NULL || !id->namespace_id[0] || !id->resource_id[0] || !id->revision[0])
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "weight_get_mapped: incomplete identity");
    *out = NULL;
    snprintf(tenant, sizeof tenant, "%s", id->tenant_id[0] ? id->tenant_id : s->tenant);
    if ((v = calloc(1, sizeof *v)) == NULL) return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
    snprintf(v->conn.master, sizeof v->conn.master, "%s", s->master);
    snprintf(v->conn.tenant, sizeof v->conn.tenant, "%s", s->tenant);
    v->conn.lease_ttl_ms = s->lease_ttl_ms;
    v->conn.transport = s->transport;
    v->id = *id;
    pthread_mutex_init(&v->k.lock, NULL);
    pthread_cond_init(&v->k.cond, NULL);
    pthread_mutex_init(&v->lock, NULL);

    /* The lease, acquired on the caller's connection; renewed and released
     * on the view's own. */
    rc = lease_call(s, &s->rpc, M(LEASE_ACQUIRE), id, 0, 0, s->lease_ttl_ms, &lr);
    if (rc < 0) goto free_view;
    if (lr->lease == NULL || lr->lease->id == 0 || lr->metadata == NULL) {
        wmrpc__lease_response__free_unpacked(lr, NULL);
        rc = wc_fail(s, WEIGHT_EPROTO, "lease reply without lease or metadata");
        goto free_view;
    }
    v->k.s = &v->conn;
    v->k.id = *id;
    v->k.lease_id = lr->lease->id;
    v->k.lease_gen = lr->lease->metadata_generation;
    v->k.interval_ms = lease_renew_interval(s, lr->lease->expires_ms);
    wc_from_wire_metadata(lr->metadata, &md);
    wmrpc__lease_response__free_unpacked(lr, NULL);
    {
        rpcc_options opt = wc_rpc_options(s);
        if (rpcc_connect(s->master, &opt, &v->conn.renew_rpc, rpc_err, sizeof rpc_err) < 0) {
            rc = wc_fail(s, WEIGHT_EIO, "lease renewal connection: %s", rpc_err);
            goto free_view;
        }
    }
    if (pthread_create(&v->k.thread, NULL, renew_main, &v->k) != 0) {
        rc = wc_fail(s, WEIGHT_ENOMEM, "cannot start the lease renewal thread");
        goto free_view;
    }
    v->k.running = 1;

    /* The manifest, verified; then where each object that holds a whole
     * tensor lies on this host (verified on first use, weight_mapped_data). */
    if ((rc = load_manifest(s, &md, tenant, id, &v->m)) < 0) goto free_view;
    if ((v->objs = calloc(v->m.n_objects ? v->m.n_objects : 1, sizeof *v->objs)) == NULL) {
        rc = wc_fail(s, WEIGHT_ENOMEM, "out of memory");
        goto free_view;
    }
    for (size_t i = 0; i < v->m.n_tensors && s->transport != 2; i++) {
        const wc_fragment *f = whole_fragment(&v->m, i);
        if (f == NULL || v->objs[f->object].state != 0) continue;
        v->objs[f->object].state = -1; /* located (verified later) */
        if ((rc = locate_object(s, v, f->object, &v->objs[f->object])) < 0) goto free_view;
    }
    for (size_t o = 0; o < v->m.n_objects; o++) v->objs[o].state = 0;
    /* The views are protected by the revision lease (renewed); the lookups'
     * read leases are given back now. */
    (void)kvc_release_read_leases(s->kv, NULL);
    *out = v;
    return WEIGHT_OK;
free_view:
    {
        char saved[sizeof s->err];
        memcpy(saved, s->err, sizeof saved);
        (void)kvc_release_read_leases(s->kv, NULL);
        weight_mapped_release(v);
        memcpy(s->err, saved, sizeof saved);
    }
    return rc;
}

size_t weight_mapped_count(const weight_mapped *v)
{
    return v ? wc_manifest_n_plain(&v->m) : 0; /* attachments are not listed */
}

int weight_mapped_get_tensor(const weight_mapped *v, size_t i, weight_mapped_tensor *out)
{
    if (v == NULL || out == NULL || i >= wc_manifest_n_plain(&v->m)) return WEIGHT_EINVALID_ARGUMENT;
    weight_tensor_info ti;
    tensor_info(&v->m, i, &ti);
    out->name = ti.name;
    out->dtype = ti.dtype;
    out->item_size = ti.item_size;
    out->ndim = ti.ndim;
    out->shape = ti.shape;
    out->alias_of = ti.alias_of;
    out->bytes = v->m.tensors[i].bytes;
    return WEIGHT_OK;
}

int weight_mapped_data(weight_mapped *v, size_t i, const void **data)
{
    if (v == NULL || data == NULL || i >= wc_manifest_n_plain(&v->m)) return WEIGHT_EINVALID_ARGUMENT;
    *data = NULL;
    const wc_fragment *f = whole_fragment(&v->m, i);
    if (f == NULL) return WEIGHT_OK;
    mapped_object *mo = &v->objs[f->object];
    const wc_object *o = &v->m.objects[f->object];
    pthread_mutex_lock(&v->lock);
    if (mo->state == 0 && mo->seg != NULL) {
        seg_map_prefault(&mo->seg->map, mo->offset, o->bytes);
        mo->state = verify_object(o, mo->seg->map.base + mo->offset) ? 1 : -1;
    }
    if (mo->state == 1) *data = mo->seg->map.base + mo->offset + f->object_offset;
    pthread_mutex_unlock(&v->lock);
    return WEIGHT_OK;
}

int weight_mapped_status(const weight_mapped *v)
{
    return v ? atomic_load(&v->k.lost) : WEIGHT_EINVALID_ARGUMENT;
}
