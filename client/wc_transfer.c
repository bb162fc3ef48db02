/* wc_transfer.c -- the transfer of weight_get: the plan's copy ops read,
 * verified and scattered into the caller's buffers (wc_transfer).
 *
 * The copy ops are grouped by payload object and handed to a small pool
 * of threads, one object at a time per thread. For each object the
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
 * file mappings holds about a window per thread, not the model. The lease
 * is the caller's: the store's renewer (wc_lease_keeper.c) keeps it
 * meanwhile, and a lost lease stops the transfer. */
#include <inttypes.h>
#include <openssl/sha.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "node_data_client.h"
#include "wc_get.h"
#include "wc_reported.h"
#include "wc_xxh3.h"

#define WC_REMOTE_WINDOW_CHUNKS 8
/* Bytes of a chunk copied, then hashed, at a time (scatter_fused): small
 * enough to be still in the core's cache when hashed. */
#define WC_FUSE_BLOCK (64u << 10)
/* Fresh READ tickets one object may ask for (refresh_job): with the default
 * node.ticket_ttl_ms of 60 s, an hour of reading one object. */
#define WC_TICKET_REFRESH_MAX 64

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
    /* The memory replica read (SRC_MAPPED, SRC_REMOTE; node "" once the job
     * reads its cold replica): named in a report of bytes that did not
     * verify (note_suspect). */
    char rep_node[64];
    char rep_segment[64];
    uint64_t rep_offset;
    unsigned refreshes;          /* fresh tickets asked for (refresh_job) */
    int refresh_unused;          /* 1: the last one has not read a window yet */
} job;

/* A memory replica whose bytes failed a chunk's checksum: reported to the
 * master once the transfer's threads are done (report_suspects). */
#define WC_SUSPECTS_MAX 8
typedef struct suspect {
    uint32_t object;
    char node[64];
    char segment[64];
    uint64_t offset;
} suspect;

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
    wc_lease_keeper *keeper;
    pthread_mutex_t err_lock;
    char err[1024];
    suspect suspects[WC_SUSPECTS_MAX]; /* err_lock's */
    size_t n_suspects;
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

/* Bytes of j's cold file did not verify: have its node hash the whole file
 * (a node that finds it corrupt reports it to the master, which drops the
 * replica), and add what the node answered to err. */
static void check_cold_source(worker *wk, const job *j, char *err, size_t errlen)
{
    char cause[512] = "";
    ndc_conn *c = worker_node(wk, j->data_addr, j->data_tls, cause, sizeof cause);
    (void)ndc_check_cold_verdict(c, j->data_addr, j->cold_name, j->ticket, j->ticket_len, cause,
                                 err, errlen);
}

/* Bytes of j's memory replica did not verify: note the replica (once; at
 * most WC_SUSPECTS_MAX a transfer) for report_suspects. */
static void note_suspect(xfer *x, const job *j)
{
    if ((j->kind != SRC_MAPPED && j->kind != SRC_REMOTE) || j->rep_node[0] == '\0') return;
    pthread_mutex_lock(&x->err_lock);
    int seen = 0;
    for (size_t i = 0; i < x->n_suspects && !seen; i++)
        seen = x->suspects[i].object == j->object && x->suspects[i].offset == j->rep_offset &&
               strcmp(x->suspects[i].node, j->rep_node) == 0 &&
               strcmp(x->suspects[i].segment, j->rep_segment) == 0;
    if (!seen && x->n_suspects < WC_SUSPECTS_MAX) {
        suspect *v = &x->suspects[x->n_suspects++];
        v->object = j->object;
        v->offset = j->rep_offset;
        snprintf(v->node, sizeof v->node, "%s", j->rep_node);
        snprintf(v->segment, sizeof v->segment, "%s", j->rep_segment);
    }
    pthread_mutex_unlock(&x->err_lock);
}

/* Report each noted replica to the master (wc_report_corrupt), best
 * effort: it has the node hash the replica and drops it only when it
 * really is corrupt. What the get returns does not change; a failed get's
 * message (x->err) says the replica was reported -- also when the master
 * refused this report because this process's earlier one (wc_reported.h)
 * already had it dropped. Called once the threads
 * are done (the store's object-service connection is this thread's). */
static void report_suspects(weight_store *s, xfer *x)
{
    int reported = 0;
    for (size_t i = 0; i < x->n_suspects; i++) {
        const suspect *v = &x->suspects[i];
        const char *key = x->m->objects[v->object].key;
        /* Refused (the master dropped the replica on an earlier report --
         * a view's of the same bytes, say): reported all the same. */
        reported |= wc_report_corrupt(s, key, v->node, v->segment, v->offset) == WEIGHT_OK ||
                    wc_reported_seen(key, v->node, v->segment, v->offset);
    }
    size_t len = strlen(x->err);
    if (reported && len > 0 && len < sizeof x->err)
        snprintf(x->err + len, sizeof x->err - len, " (the memory replica read was reported to "
                 "the master, which has its node check it)");
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
            if (frc == WEIGHT_EDIGEST_MISMATCH) note_suspect(x, j);
            if (frc != WEIGHT_ENOMEM && use_cold_instead(j)) continue; /* same window, cold */
            if (frc == WEIGHT_EDIGEST_MISMATCH && j->kind == SRC_COLD)
                check_cold_source(wk, j, ferr, sizeof ferr);
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
    int rc = wc_kv_get(x->s, o->key, &obj);
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
        snprintf(j->rep_node, sizeof j->rep_node, "%s", pick->node);
        snprintf(j->rep_segment, sizeof j->rep_segment, "%s", pick->segment);
        j->rep_offset = pick->offset;
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
        int rc = wc_kv_get(s, o->key, &obj);
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
                    snprintf(j->rep_node, sizeof j->rep_node, "%s", rep->node);
                    snprintf(j->rep_segment, sizeof j->rep_segment, "%s", rep->segment);
                    j->rep_offset = rep->offset;
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
            snprintf(j->rep_node, sizeof j->rep_node, "%s", remote->node);
            snprintf(j->rep_segment, sizeof j->rep_segment, "%s", remote->segment);
            j->rep_offset = remote->offset;
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


/* -- the transfer's entry point ---------------------------------------------- */

int wc_transfer(weight_store *s, const wc_manifest *m, const wc_plan *plan, uint8_t *const *bufs,
                wc_lease_keeper *k, uint64_t n_placed, weight_get_stats *stats)
{
    xfer x;
    size_t *order = NULL;
    pthread_t threads[WC_MAX_THREADS];
    worker workers[WC_MAX_THREADS];
    unsigned n_threads = 0;
    int rc;

    memset(&x, 0, sizeof x);
    memset(workers, 0, sizeof workers);
    x.s = s;
    x.m = m;
    x.plan = plan;
    x.bindings = bufs;
    x.keeper = k;
    pthread_mutex_init(&x.err_lock, NULL);
    pthread_mutex_init(&x.kv_lock, NULL);
    pthread_mutex_init(&x.done_lock, NULL);
    pthread_cond_init(&x.done_cond, NULL);
    if ((rc = build_jobs(s, &x, &order)) < 0) goto free_jobs;
    if ((rc = split_mapped_jobs(s, &x)) < 0) goto free_jobs;
    n_threads = s->threads < x.n_jobs ? s->threads : (unsigned)x.n_jobs;
    wc_progress(s, 0, plan->total_bytes);
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
        wc_realtime_in_ms(&ts, 100);
        pthread_cond_timedwait(&x.done_cond, &x.done_lock, &ts);
        if (x.done_workers < n_threads && s->progress) {
            pthread_mutex_unlock(&x.done_lock);
            wc_progress(s, atomic_load(&x.copied), plan->total_bytes);
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
    report_suspects(s, &x);
    rc = atomic_load(&x.failed);
    if (rc == WEIGHT_ECANCELED) atomic_store(&s->cancel, 0);
    if (rc == 0 && atomic_load(&k->lost)) {
        rc = atomic_load(&k->lost);
        wc_fail(s, rc, "%s", k->lost_msg);
    } else if (rc < 0) {
        wc_fail(s, rc, "%s", x.err);
    }
    if (rc == 0) wc_progress(s, plan->total_bytes, plan->total_bytes);
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
    return rc;
}
