/* weight_put.c -- the writer of libweightclient: publishing a revision.
 *
 * weight_put_begin asks the plugin to open an IMPORTING revision (it answers
 * with the group and manifest keys and the metadata generation that fences
 * the commit). The writer then only collects the caller's tensors, fragments
 * and aliases -- pointers, no copy. weight_writer_commit does the work:
 *
 *   1. wc_pack decides the payload objects (bounded size, tensors never
 *      split unless bigger than the bound) and the copies into them;
 *   2. each payload object is written into the group (type WEIGHT) straight
 *      from the caller's memory, one object per thread (up to the store's
 *      threads at once), in blocks of 256 KiB: co-located, each block is
 *      copied into the node's mapped segment file (its pages faulted in
 *      first with one madvise); otherwise it is streamed to the node's data
 *      server in one write of the object's range (the write ticket covers
 *      exactly that range), a block gathered from several sources copied
 *      into a block buffer first. Each block is hashed right after it is
 *      copied, while it is in cache: the object's SHA-256 (what put end
 *      records) and the XXH3-64 of each 1 MiB chunk, in one pass over the
 *      caller's memory;
 *   3. the manifest -- identity, group, tensors, fragments, aliases, objects
 *      with their digests, affinity units -- is encoded and written LAST
 *      (type METADATA);
 *   4. the commit carries payload count, logical bytes, the payload-key
 *      digest, manifest key and SHA-256, and the affinity units and digest.
 *
 * Any failure aborts the import (the plugin removes what was written) and
 * frees the writer; nothing is ever published half-way. A writer that died
 * without aborting leaves an open import: weight_put_begin on the same
 * identity resumes it (same group and fence), and the objects are written
 * with overwrite, replacing whatever the dead writer left -- a put it left
 * in flight (SMP_EBUSY at put start) is revoked and started again. */
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "node_data_client.h"
#include "wc_digest.h"
#include "wc_pack.h"
#include "wc_store.h"
#include "wc_xxh3.h"

#define M(name) WMRPC__WEIGHT_METHOD__WEIGHT_##name
/* Bytes copied and hashed at a time: small enough that the copy leaves them
 * in the core's L2 cache for SHA-256 and XXH3, big enough to amortise the calls. */
#define WC_COPY_BLOCK (256u << 10)
_Static_assert(WEIGHT_ATTACHMENT_MAX_BYTES == WC_ATTACHMENT_MAX_BYTES, "one attachment cap");

/* One source fragment the caller handed in. */
typedef struct wsrc {
    uint64_t offset[WC_MAX_NDIM];
    uint64_t shape[WC_MAX_NDIM];
    const void *data;
} wsrc;

typedef struct wtensor {
    char *name;
    wc_dtype dtype;
    uint32_t ndim;
    uint64_t shape[WC_MAX_NDIM];
    int whole;            /* added with add_tensor: one source, the whole tensor */
    int attachment;       /* added with add_attachment: a file, U8 [bytes] */
    char *tied_to;        /* an alias */
    wsrc *src;
    size_t n_src, cap_src;
} wtensor;

struct weight_writer {
    weight_store *s;
    weight_identity id;               /* tenant resolved */
    char group[WC_KEY_BUF];
    char manifest_key[WC_KEY_BUF];
    uint64_t metadata_generation;
    wtensor *t;
    size_t n, cap;
    wc_file_meta *meta;               /* weight_writer_add_file_metadata, in call order */
    size_t n_meta, cap_meta;
    int failed;                       /* an add failed: commit refuses */
    int keep_open;                    /* a failed commit leaves the import open */
};

void wc_writer_keep_open(weight_writer *w)
{
    w->keep_open = 1;
}

/* -- begin / add ------------------------------------------------------------ */

int weight_put_begin(weight_store *s, const weight_identity *id, const weight_policy *policy,
                     weight_writer **out)
{
    return wc_put_begin(s, id, policy, 1, out);
}

/* weight_put_begin, with the store's default policy applied to a NULL
 * policy only when store_default is set (an upsert leaves it out: its
 * target keeps the base's policy unless the caller gives one). */
int wc_put_begin(weight_store *s, const weight_identity *id, const weight_policy *policy,
                 int store_default, weight_writer **out)
{
    Wmrpc__ImportBeginRequest req = WMRPC__IMPORT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightPolicy wp = WMRPC__WEIGHT_POLICY__INIT;
    Wmrpc__WeightIdentity wid;
    Wmrpc__ImportBeginResponse *r = NULL;
    char tenant[WEIGHT_ID_MAX + 1];
    weight_writer *w;
    int rc;
    if (s == NULL) return WEIGHT_EINVALID_ARGUMENT;
    s->err[0] = '\0';
    if (out == NULL || id == NULL || !id->namespace_id[0] || !id->resource_id[0] || !id->revision[0])
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "weight_put_begin: incomplete identity");
    *out = NULL;
    if (policy == NULL && store_default && s->has_default_policy) policy = &s->default_policy;
    wc_wire_identity(s, id, &wid, tenant);
    req.identity = &wid;
    if (policy != NULL) {
        wp.preferred_residency = (uint32_t)policy->preferred;
        wp.mixed_hot_ratio = policy->mixed_hot_ratio;
        wp.migration_mode = (uint32_t)policy->mode;
        req.policy = &wp;
    }
    rc = wc_call(s, &s->rpc, M(IMPORT_BEGIN), &req.base, &wmrpc__import_begin_response__descriptor,
                 (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    if (r->metadata == NULL || r->metadata->group_key == NULL || !r->metadata->group_key[0] ||
        r->metadata->manifest_key == NULL || !r->metadata->manifest_key[0] ||
        strlen(r->metadata->group_key) >= WC_KEY_BUF || strlen(r->metadata->manifest_key) >= WC_KEY_BUF) {
        wmrpc__import_begin_response__free_unpacked(r, NULL);
        return wc_fail(s, WEIGHT_EPROTO, "import begin: reply without group and manifest keys");
    }
    if ((w = calloc(1, sizeof *w)) == NULL) {
        wmrpc__import_begin_response__free_unpacked(r, NULL);
        return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
    }
    w->s = s;
    w->id = *id;
    snprintf(w->id.tenant_id, sizeof w->id.tenant_id, "%s", tenant);
    snprintf(w->group, sizeof w->group, "%s", r->metadata->group_key);
    snprintf(w->manifest_key, sizeof w->manifest_key, "%s", r->metadata->manifest_key);
    w->metadata_generation = r->metadata->metadata_generation;
    wmrpc__import_begin_response__free_unpacked(r, NULL);
    *out = w;
    return WEIGHT_OK;
}

static wtensor *find_tensor(weight_writer *w, const char *name)
{
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) return &w->t[i];
    return NULL;
}

static wtensor *new_tensor(weight_writer *w, const char *name)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (nt == NULL) return NULL;
        w->t = nt;
        w->cap = cap;
    }
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    if ((t->name = strdup(name)) == NULL) return NULL;
    w->n++;
    return t;
}

/* Record a failed add: the writer is poisoned (commit aborts). */
static int add_fail(weight_writer *w, int rc, const char *fmt, const char *name)
{
    w->failed = 1;
    return wc_fail(w->s, rc, fmt, name);
}

/* The common part of add_tensor and add_fragment. */
static int add_source(weight_writer *w, const char *name, const char *dtype, uint32_t ndim,
                      const uint64_t *gshape, const uint64_t *goffset, const uint64_t *lshape,
                      const void *data, int whole)
{
    if (w == NULL) return WEIGHT_EINVALID_ARGUMENT;
    if (name == NULL || name[0] == '\0' || dtype == NULL)
        return add_fail(w, WEIGHT_EINVALID_ARGUMENT, "tensor%s: missing name or dtype", "");
    wc_dtype dt = wc_dtype_from_name(dtype, strlen(dtype));
    if (dt == WC_DTYPE_INVALID)
        return add_fail(w, WEIGHT_EINVALID_ARGUMENT, "tensor '%s': unknown dtype", name);
    if (ndim > WC_MAX_NDIM || (ndim > 0 && (gshape == NULL || (!whole && (goffset == NULL || lshape == NULL)))))
        return add_fail(w, WEIGHT_EINVALID_ARGUMENT, "tensor '%s': bad rank or missing shape", name);
    uint64_t bytes = 0;
    if (wc_shape_bytes(whole ? gshape : lshape, ndim, wc_dtype_size(dt), &bytes) < 0)
        return add_fail(w, WEIGHT_EINVALID_ARGUMENT, "tensor '%s': size overflows", name);
    if (bytes > 0 && data == NULL)
        return add_fail(w, WEIGHT_EINVALID_ARGUMENT, "tensor '%s': no data", name);
    wtensor *t = find_tensor(w, name);
    if (t != NULL) {
        if (t->whole || whole || t->tied_to)
            return add_fail(w, WEIGHT_EINVALID_ARGUMENT, "tensor '%s' added twice", name);
        if (t->dtype != dt || t->ndim != ndim ||
            (ndim && memcmp(t->shape, gshape, ndim * sizeof *gshape) != 0))
            return add_fail(w, WEIGHT_EINVALID_ARGUMENT,
                            "tensor '%s': fragments disagree on dtype or global shape", name);
    } else {
        if ((t = new_tensor(w, name)) == NULL)
            return add_fail(w, WEIGHT_ENOMEM, "out of memory%s", "");
        t->dtype = dt;
        t->ndim = ndim;
        if (ndim) memcpy(t->shape, gshape, ndim * sizeof *gshape);
        t->whole = whole;
    }
    if (t->n_src == t->cap_src) {
        size_t cap = t->cap_src ? t->cap_src * 2 : 4;
        wsrc *ns = realloc(t->src, cap * sizeof *ns);
        if (ns == NULL) return add_fail(w, WEIGHT_ENOMEM, "out of memory%s", "");
        t->src = ns;
        t->cap_src = cap;
    }
    wsrc *src = &t->src[t->n_src++];
    memset(src, 0, sizeof *src);
    for (uint32_t d = 0; d < ndim; d++) {
        src->offset[d] = whole ? 0 : goffset[d];
        src->shape[d] = whole ? gshape[d] : lshape[d];
    }
    src->data = data;
    return WEIGHT_OK;
}

int weight_writer_add_tensor(weight_writer *w, const char *name, const char *dtype, uint32_t ndim,
                             const uint64_t *shape, const void *data)
{
    return add_source(w, name, dtype, ndim, shape, NULL, NULL, data, 1);
}

int weight_writer_add_fragment(weight_writer *w, const char *name, const char *dtype, uint32_t ndim,
                               const uint64_t *global_shape, const uint64_t *global_offset,
                               const uint64_t *local_shape, const void *data)
{
    return add_source(w, name, dtype, ndim, global_shape, global_offset, local_shape, data, 0);
}

int weight_writer_add_attachment(weight_writer *w, const char *name, const void *data,
                                 uint64_t bytes)
{
    if (w == NULL) return WEIGHT_EINVALID_ARGUMENT;
    if (name == NULL || name[0] == '\0' || strchr(name, '/') != NULL || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0)
        return add_fail(w, WEIGHT_EINVALID_ARGUMENT, "attachment '%s': not a file name",
                        name ? name : "");
    if (bytes > WC_ATTACHMENT_MAX_BYTES) {
        w->failed = 1;
        return wc_fail(w->s, WEIGHT_EINVALID_ARGUMENT,
                       "attachment '%s': %" PRIu64 " bytes, over the %llu bytes an attachment "
                       "may hold", name, bytes, (unsigned long long)WC_ATTACHMENT_MAX_BYTES);
    }
    uint64_t shape[1] = {bytes};
    int rc = add_source(w, name, "U8", 1, shape, NULL, NULL, bytes ? data : "", 1);
    if (rc < 0) return rc;
    find_tensor(w, name)->attachment = 1;
    return WEIGHT_OK;
}

int weight_writer_add_file_metadata(weight_writer *w, const char *key, const char *value)
{
    char err[256];
    if (w == NULL) return WEIGHT_EINVALID_ARGUMENT;
    if (wc_file_meta_check(key, value, err, sizeof err) < 0) {
        w->failed = 1;
        return wc_fail(w->s, WEIGHT_EINVALID_ARGUMENT, "%s", err);
    }
    for (size_t i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta[i].key, key) == 0)
            return add_fail(w, WEIGHT_EINVALID_ARGUMENT, "file metadata '%s' added twice", key);
    if (w->n_meta == w->cap_meta) {
        size_t ncap = w->cap_meta ? w->cap_meta * 2 : 8;
        wc_file_meta *n = realloc(w->meta, ncap * sizeof *n);
        if (n == NULL) return add_fail(w, WEIGHT_ENOMEM, "out of memory%s", "");
        w->meta = n;
        w->cap_meta = ncap;
    }
    wc_file_meta *pair = &w->meta[w->n_meta];
    pair->key = strdup(key);
    pair->value = strdup(value);
    if (pair->key == NULL || pair->value == NULL) {
        free(pair->key);
        free(pair->value);
        return add_fail(w, WEIGHT_ENOMEM, "out of memory%s", "");
    }
    w->n_meta++;
    return WEIGHT_OK;
}

int weight_writer_alias(weight_writer *w, const char *name, const char *target)
{
    if (w == NULL) return WEIGHT_EINVALID_ARGUMENT;
    if (name == NULL || target == NULL || !name[0] || !target[0] || strcmp(name, target) == 0)
        return add_fail(w, WEIGHT_EINVALID_ARGUMENT, "alias%s: needs a name and another target", "");
    if (find_tensor(w, name) != NULL)
        return add_fail(w, WEIGHT_EINVALID_ARGUMENT, "tensor '%s' added twice", name);
    wtensor *t = new_tensor(w, name);
    if (t == NULL || (t->tied_to = strdup(target)) == NULL)
        return add_fail(w, WEIGHT_ENOMEM, "out of memory%s", "");
    return WEIGHT_OK;
}

static void writer_free(weight_writer *w)
{
    if (w == NULL) return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].tied_to);
        free(w->t[i].src);
    }
    free(w->t);
    for (size_t i = 0; i < w->n_meta; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->meta);
    free(w);
}

/* Tell the plugin to drop the import (best effort: the error that led here
 * is what the caller sees). */
static void import_abort(weight_writer *w)
{
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    Wmrpc__WeightIdentity wid;
    char tenant[WEIGHT_ID_MAX + 1];
    char saved[sizeof w->s->err];
    memcpy(saved, w->s->err, sizeof saved);
    wc_wire_identity(w->s, &w->id, &wid, tenant);
    req.identity = &wid;
    req.expected_metadata_generation = w->metadata_generation;
    wc_call(w->s, &w->s->rpc, M(IMPORT_ABORT), &req.base, NULL, NULL);
    memcpy(w->s->err, saved, sizeof saved);
}

void weight_writer_abort(weight_writer *w)
{
    if (w == NULL) return;
    import_abort(w);
    writer_free(w);
}

/* -- writing the objects ---------------------------------------------------- */

/* The streaming digests of one object: SHA-256 and per-chunk XXH3. */
typedef struct objhash {
    EVP_MD_CTX *sha;
    XXH3_state_t *xx;
    uint64_t fill;        /* bytes in the current chunk */
    uint64_t *sums;
    size_t n_sums;
} objhash;

static int objhash_begin(objhash *h, uint64_t bytes)
{
    memset(h, 0, sizeof *h);
    size_t n = (size_t)(bytes / WC_CHECK_CHUNK + (bytes % WC_CHECK_CHUNK != 0));
    h->sha = EVP_MD_CTX_new();
    h->xx = XXH3_createState();
    h->sums = malloc((n ? n : 1) * sizeof *h->sums);
    if (h->sha == NULL || h->xx == NULL || h->sums == NULL ||
        EVP_DigestInit_ex(h->sha, EVP_sha256(), NULL) != 1 || XXH3_64bits_reset(h->xx) != XXH_OK)
        return WEIGHT_ENOMEM;
    return WEIGHT_OK;
}

static void objhash_feed(objhash *h, const uint8_t *p, uint64_t len)
{
    EVP_DigestUpdate(h->sha, p, (size_t)len);
    while (len > 0) {
        uint64_t take = WC_CHECK_CHUNK - h->fill;
        if (take > len) take = len;
        XXH3_64bits_update(h->xx, p, (size_t)take);
        h->fill += take;
        p += take;
        len -= take;
        if (h->fill == WC_CHECK_CHUNK) {
            h->sums[h->n_sums++] = XXH3_64bits_digest(h->xx);
            XXH3_64bits_reset(h->xx);
            h->fill = 0;
        }
    }
}

static void objhash_end(objhash *h, uint8_t sha[32])
{
    unsigned n = 32;
    if (h->fill > 0) h->sums[h->n_sums++] = XXH3_64bits_digest(h->xx);
    EVP_DigestFinal_ex(h->sha, sha, &n);
}

static void objhash_free(objhash *h)
{
    EVP_MD_CTX_free(h->sha);
    XXH3_freeState(h->xx);
    free(h->sums);
}

/* The commit state: the packing and the per-source pointers. */
typedef struct commit_ctx {
    weight_writer *w;
    wc_pack_result pack;
    const void ***srcs;       /* per caller tensor: its sources' data */
    atomic_uint_fast64_t done;
    uint64_t total;
    pthread_mutex_t lock;     /* finished / cond: the batch's progress */
    pthread_cond_t cond;
    unsigned finished;
} commit_ctx;

/* One payload object in flight, filled by its own thread: put start and
 * put end are the calling thread's (one object-service connection), the
 * copy, the digests and a remote write are the slot's. A slot keeps its
 * node connections across batches. */
typedef struct wslot {
    commit_ctx *cx;
    uint32_t oi;
    size_t first, last;       /* its puts: pack.puts[first, last) */
    kvc_replica where;        /* from put start */
    int started;              /* put start succeeded, put end not yet */
    objhash h;
    uint8_t sha[32];
    int rc;
    char err[1400];
    struct { char addr[128]; ndc_conn *c; } nodes[4];
    pthread_t thread;
} wslot;

static ndc_conn *slot_node(wslot *sl, const char *addr, int tls)
{
    char err[256];
    for (int i = 0; i < 4; i++)
        if (sl->nodes[i].c && strcmp(sl->nodes[i].addr, addr) == 0) return sl->nodes[i].c;
    for (int i = 0; i < 4; i++) {
        if (sl->nodes[i].c) continue;
        ndc_options o = {.timeout_ms = 60000, .socket_buffer_bytes = 4 << 20, .tls = tls,
                         .tls_ctx = sl->cx->w->s->tls_ctx};
        if (ndc_connect(addr, &o, &sl->nodes[i].c, err, sizeof err) < 0) {
            snprintf(sl->err, sizeof sl->err, "node %s: %s", addr, err);
            return NULL;
        }
        snprintf(sl->nodes[i].addr, sizeof sl->nodes[i].addr, "%s", addr);
        return sl->nodes[i].c;
    }
    snprintf(sl->err, sizeof sl->err, "too many nodes for one writer");
    return NULL;
}

/* Where a slot stands in its object: put k of pack.puts, bytes done in it. */
typedef struct obj_cursor {
    wslot *sl;
    size_t k;
    uint64_t in_put;
} obj_cursor;

/* The next piece of the object from the caller's sources: at most max
 * bytes, within one put; *obj_off is where it goes in the object. NULL at
 * the end of the object. */
static const uint8_t *cursor_next(obj_cursor *c, uint64_t max, uint64_t *n, uint64_t *obj_off)
{
    commit_ctx *cx = c->sl->cx;
    while (c->k < c->sl->last && c->in_put == cx->pack.puts[c->k].bytes) {
        c->k++;
        c->in_put = 0;
    }
    if (c->k >= c->sl->last) return NULL;
    const wc_pack_put *p = &cx->pack.puts[c->k];
    uint64_t left = p->bytes - c->in_put;
    *n = left < max ? left : max;
    *obj_off = p->object_offset + c->in_put;
    const uint8_t *src = (const uint8_t *)cx->srcs[p->tensor][p->source] + p->source_offset + c->in_put;
    c->in_put += *n;
    return src;
}

static int slot_canceled(wslot *sl)
{
    if (!atomic_load(&sl->cx->w->s->cancel)) return 0;
    sl->rc = WEIGHT_ECANCELED; /* weight_store_cancel: stop at this block */
    snprintf(sl->err, sizeof sl->err, "weight_writer_commit canceled");
    return 1;
}

/* Co-located: copy the object block by block into the mapped segment at
 * base (the object's first byte), hashing each block right after its copy
 * while its source bytes are still in cache (one pass over memory). The
 * pages of the range are faulted in first with one madvise, not one write
 * fault per page (a kernel without MADV_POPULATE_WRITE faults them as the
 * copy goes). Returns 0, or -1 with sl->rc set. */
static int fill_mapped(wslot *sl, uint8_t *base, uint64_t bytes)
{
    obj_cursor c = {sl, sl->first, 0};
    const uint8_t *src;
    uint64_t n, off;
#ifdef MADV_POPULATE_WRITE
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)base & ~(page - 1), hi = ((uintptr_t)base + bytes + page - 1) & ~(page - 1);
    if (bytes > 0) (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
#else
    (void)bytes;
#endif
    while ((src = cursor_next(&c, WC_COPY_BLOCK, &n, &off)) != NULL) {
        if (slot_canceled(sl)) return -1;
        memcpy(base + off, src, (size_t)n);
        objhash_feed(&sl->h, src, n);
        atomic_fetch_add(&sl->cx->done, n);
    }
    return 0;
}

/* The source of a remote object's write (ndc_write_stream): blocks of the
 * object in order, each copied from the caller's memory into the slot's
 * block buffer, hashed there and handed to the socket from it. The copy is
 * made even for a block that lies in one source: the kernel then copies
 * every block into the socket from the same WC_COPY_BLOCK bytes, never
 * from the caller's gigabytes. On the benches' PVM guest, sending straight
 * from a caller's buffer of 4 KiB pages cost the client 2.78 s of CPU per
 * GiB (0.52 GiB/s for 2 GiB, TP 4) against 0.97 s (1.51-1.54 GiB/s) with
 * the copy, a memcpy within cache (bench/JOURNAL.md, "One make bench
 * from a clean clone"). */
typedef struct remote_src {
    wslot *sl;
    obj_cursor c;
    uint8_t *block;            /* WC_COPY_BLOCK bytes */
    const uint8_t *pend;       /* a piece taken from the cursor, not yet used */
    uint64_t pend_n;
} remote_src;

static int remote_next(void *ctx, const void **data, size_t *len)
{
    remote_src *r = ctx;
    uint64_t fill = 0, off;
    if (slot_canceled(r->sl)) return WEIGHT_ECANCELED;
    while (fill < WC_COPY_BLOCK) {
        if (r->pend == NULL && (r->pend = cursor_next(&r->c, WC_COPY_BLOCK - fill, &r->pend_n,
                                                      &off)) == NULL)
            break;
        uint64_t take = r->pend_n < WC_COPY_BLOCK - fill ? r->pend_n : WC_COPY_BLOCK - fill;
        memcpy(r->block + fill, r->pend, (size_t)take);
        fill += take;
        r->pend = take == r->pend_n ? NULL : r->pend + take;
        r->pend_n -= take;
    }
    if (fill == 0) return WEIGHT_EINVALID_ARGUMENT; /* asked past the object */
    *data = r->block;
    *len = (size_t)fill;
    objhash_feed(&r->sl->h, *data, fill);
    atomic_fetch_add(&r->sl->cx->done, fill);
    return 0;
}

/* Over TCP: stream the object to its node, copy and hash per block. */
static void fill_remote(wslot *sl, const wc_object *o)
{
    remote_src r = {sl, {sl, sl->first, 0}, NULL, NULL, 0};
    ndc_conn *nc = slot_node(sl, sl->where.data_addr, sl->where.data_tls);
    if (nc == NULL) {
        sl->rc = WEIGHT_EIO;
        return;
    }
    if ((r.block = malloc(WC_COPY_BLOCK)) == NULL) {
        sl->rc = WEIGHT_ENOMEM;
        snprintf(sl->err, sizeof sl->err, "out of memory");
        return;
    }
    int rc = ndc_write_stream(nc, sl->where.segment, sl->where.offset, o->bytes, remote_next, &r,
                              sl->where.ticket, sl->where.ticket_len);
    if (rc < 0 && sl->rc == 0) {
        sl->rc = WEIGHT_EIO;
        snprintf(sl->err, sizeof sl->err, "writing %s to node %s: %s", o->key, sl->where.data_addr,
                 ndc_last_error(nc));
    }
    if (rc < 0)
        for (int i = 0; i < 4; i++)
            if (sl->nodes[i].c == nc) { /* broken after a transport error or a stopped source */
                ndc_close(nc);
                sl->nodes[i].c = NULL;
            }
    free(r.block);
}

/* Fill a started object: its puts from the caller's memory into the mapped
 * segment (co-located) or streamed to the node's data server, computing
 * its SHA-256 and chunk checksums in the same pass. Sets sl->rc / sl->err. */
static void fill_object(wslot *sl)
{
    commit_ctx *cx = sl->cx;
    weight_store *s = cx->w->s;
    const wc_object *o = &cx->pack.manifest.objects[sl->oi];
    sl->rc = objhash_begin(&sl->h, o->bytes);
    if (sl->rc < 0) {
        snprintf(sl->err, sizeof sl->err, "out of memory");
        return;
    }
    const seg_map *map = s->transport == 2 ? NULL : wc_seg_get(s, &sl->where, 1);
    if (map != NULL && (sl->where.offset > map->size || o->bytes > map->size - sl->where.offset)) {
        sl->rc = WEIGHT_EIO;
        snprintf(sl->err, sizeof sl->err, "put start %s: range outside segment %s", o->key,
                 seg_map_where(sl->where.segment_path, sl->where.local_socket));
        return;
    }
    if (map == NULL && s->transport == 1) {
        sl->rc = WEIGHT_EIO;
        snprintf(sl->err, sizeof sl->err, "segment %s of node %s cannot be mapped here (the "
                 "local transport was asked for)", sl->where.segment, sl->where.node);
        return;
    }
    if (map != NULL) {
        if (fill_mapped(sl, map->base + sl->where.offset, o->bytes) < 0) return;
    } else {
        fill_remote(sl, o);
        if (sl->rc < 0) return;
    }
    objhash_end(&sl->h, sl->sha);
}

static void *fill_main(void *arg)
{
    wslot *sl = arg;
    fill_object(sl);
    pthread_mutex_lock(&sl->cx->lock);
    sl->cx->finished++;
    pthread_cond_signal(&sl->cx->cond);
    pthread_mutex_unlock(&sl->cx->lock);
    return NULL;
}

/* Whether a put start refused SMP_EBUSY met a put of the same key still in
 * flight -- left by a writer of this import that died in the middle of the
 * object (a SIGKILL: nothing revoked it, and the master would take it back
 * only node.put_timeout_ms after its bytes stopped) -- and revoked it: 1
 * when the caller should start its put again (once), 0 otherwise (the put
 * start's refusal stands: no put was in flight, the key is busy for
 * another reason). A resumed import replaces whatever the dead writer
 * left, its unfinished puts too. */
static int revoked_dead_put(weight_store *s, int rc, const char *key)
{
    return rc == SMP_EBUSY && !kvc_transport_failed(s->kv) && kvc_put_revoke(s->kv, key) == SMP_OK;
}

/* Revoke the puts of the slots started and not ended (the error that led
 * here stays the store's message). */
static void revoke_started(commit_ctx *cx, wslot *slots, size_t n)
{
    weight_store *s = cx->w->s;
    for (size_t i = 0; i < n; i++) {
        if (!slots[i].started) continue;
        slots[i].started = 0;
        if (!kvc_transport_failed(s->kv))
            kvc_put_revoke(s->kv, cx->pack.manifest.objects[slots[i].oi].key);
    }
}

/* Whether a put that failed may be made again from its put start, once the
 * object connection moved since the put began or lost a call's answer: a
 * leader that stopped (SIGTERM: it refused the next call, and the put end
 * went to the next leader, which never saw the put start) or died. An
 * object of an open import is written with overwrite, so writing the same
 * bytes again is safe whatever the lost call did; the puts the old master
 * holds die with its leadership. Up to WC_PUT_AGAIN times a commit; a lost
 * answer with no move since only as the first. */
#define WC_PUT_AGAIN 3
static int put_again(weight_store *s, int rc, uint64_t moves_before, unsigned *agains)
{
    if (rc >= 0 || rc == WEIGHT_ECANCELED || rc == WEIGHT_ENOMEM || *agains >= WC_PUT_AGAIN)
        return 0;
    /* a lost answer without a move since: once (the master may be gone) */
    if (kvc_moves(s->kv) == moves_before && (!kvc_transport_failed(s->kv) || *agains > 0))
        return 0;
    (*agains)++;
    s->err[0] = '\0';
    return 1;
}

/* Write every payload object, up to s->threads at once: put start for a
 * batch (this thread), fill each in its own thread while this one reports
 * progress, then put end in order and record each object's digests in the
 * manifest. On failure the batch's open puts are revoked, and the batch is
 * written again when its connection moved meanwhile (put_again). */
static int write_objects(commit_ctx *cx, unsigned *agains)
{
    weight_store *s = cx->w->s;
    wc_manifest *m = &cx->pack.manifest;
    unsigned n_slots = s->threads ? s->threads : 1;
    wslot *slots = calloc(n_slots, sizeof *slots);
    int rc = WEIGHT_OK;
    if (slots == NULL) return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
    pthread_mutex_init(&cx->lock, NULL);
    pthread_cond_init(&cx->cond, NULL);
    for (size_t first = 0; first < cx->pack.n_puts && rc == WEIGHT_OK;) {
        size_t n = 0, batch_first = first;
        uint64_t moves = kvc_moves(s->kv), done = atomic_load(&cx->done);
        /* put start for the batch */
        while (n < n_slots && first < cx->pack.n_puts) {
            wslot *sl = &slots[n];
            size_t last = first;
            uint32_t oi = cx->pack.puts[first].object;
            while (last < cx->pack.n_puts && cx->pack.puts[last].object == oi) last++;
            sl->cx = cx;
            sl->oi = oi;
            sl->first = first;
            sl->last = last;
            sl->rc = 0;
            sl->err[0] = '\0';
            memset(&sl->h, 0, sizeof sl->h);
            memset(&sl->where, 0, sizeof sl->where);
            n++;
            first = last;
            /* overwrite: a retried import replaces what a dead writer left
             * (the plugin's guard allows it only while IMPORTING). */
            rc = kvc_put_start(s->kv, m->objects[oi].key, m->objects[oi].bytes, SMP_DATA_WEIGHT,
                               cx->w->group, 1, &sl->where);
            if (revoked_dead_put(s, rc, m->objects[oi].key))
                rc = kvc_put_start(s->kv, m->objects[oi].key, m->objects[oi].bytes,
                                   SMP_DATA_WEIGHT, cx->w->group, 1, &sl->where);
            if (rc < 0) {
                /* the master's refusal may name the step and key itself */
                const char *why = kvc_error(s->kv);
                if (strncmp(why, "put start '", 11) == 0)
                    rc = wc_fail(s, rc, "%s", why);
                else
                    rc = wc_fail(s, rc, "put start %s: %s", m->objects[oi].key, why);
                break;
            }
            sl->started = 1;
        }
        /* A put start that moved the connection (the master stopped or
         * died between two of the batch's put starts) leaves the batch's
         * earlier ranges with a master that no longer leads: its successor
         * never heard of them and may give them to other objects, so they
         * must not be written. The batch starts again where the connection
         * is now (put_again: it moved). */
        if (rc == WEIGHT_OK && kvc_moves(s->kv) != moves)
            rc = wc_fail(s, WEIGHT_EAGAIN, "put start %s: the master changed while the batch's "
                         "puts started; the ranges the old master gave are not written",
                         m->objects[slots[n - 1].oi].key);
        /* fill */
        unsigned spawned = 0;
        cx->finished = 0;
        for (size_t i = 0; rc == WEIGHT_OK && i < n; i++) {
            if (pthread_create(&slots[i].thread, NULL, fill_main, &slots[i]) != 0) {
                rc = wc_fail(s, WEIGHT_ENOMEM, "cannot start a writer thread");
                break;
            }
            spawned++;
        }
        pthread_mutex_lock(&cx->lock);
        while (cx->finished < spawned) {
            struct timespec ts;
            wc_realtime_in_ms(&ts, 100);
            pthread_cond_timedwait(&cx->cond, &cx->lock, &ts);
            pthread_mutex_unlock(&cx->lock);
            wc_progress(s, atomic_load(&cx->done), cx->total);
            pthread_mutex_lock(&cx->lock);
        }
        pthread_mutex_unlock(&cx->lock);
        for (unsigned i = 0; i < spawned; i++) pthread_join(slots[i].thread, NULL);
        for (size_t i = 0; rc == WEIGHT_OK && i < n; i++)
            if (slots[i].rc < 0) rc = wc_fail(s, slots[i].rc, "%s", slots[i].err);
        /* put end, in order */
        for (size_t i = 0; rc == WEIGHT_OK && i < n; i++) {
            const wc_object *o = &m->objects[slots[i].oi];
            if ((rc = kvc_put_end(s->kv, o->key, slots[i].sha, NULL)) < 0) {
                rc = wc_fail(s, rc, "put end %s: %s", o->key, kvc_error(s->kv));
                break;
            }
            slots[i].started = 0;
            rc = wc_manifest_set_object_check(m, slots[i].oi, slots[i].sha, WC_CHECK_CHUNK,
                                              slots[i].h.sums, slots[i].h.n_sums);
            if (rc < 0) rc = wc_fail(s, WEIGHT_ENOMEM, "out of memory");
        }
        if (rc < 0) revoke_started(cx, slots, n);
        for (size_t i = 0; i < n; i++) objhash_free(&slots[i].h);
        if (put_again(s, rc, moves, agains)) {
            rc = WEIGHT_OK;
            first = batch_first;
            atomic_store(&cx->done, done);
        }
    }
    if (rc == WEIGHT_OK) wc_progress(s, cx->total, cx->total);
    for (unsigned i = 0; i < n_slots; i++)
        for (int k = 0; k < 4; k++) ndc_close(slots[i].nodes[k].c);
    pthread_cond_destroy(&cx->cond);
    pthread_mutex_destroy(&cx->lock);
    free(slots);
    return rc;
}

/* Build the pack input from the writer's tensors and run wc_pack. */
static int pack_tensors(commit_ctx *cx)
{
    weight_writer *w = cx->w;
    weight_store *s = w->s;
    wc_pack_tensor *pt = calloc(w->n ? w->n : 1, sizeof *pt);
    wc_pack_fragment **pf = calloc(w->n ? w->n : 1, sizeof *pf);
    char err[512] = "";
    wc_identity id;
    int rc = WEIGHT_ENOMEM;
    cx->srcs = calloc(w->n ? w->n : 1, sizeof *cx->srcs);
    if (pt == NULL || pf == NULL || cx->srcs == NULL) {
        wc_fail(s, rc, "out of memory");
        goto free_input;
    }
    for (size_t i = 0; i < w->n; i++) {
        wtensor *t = &w->t[i];
        if (t->tied_to != NULL) {
            wtensor *target = find_tensor(w, t->tied_to);
            if (target == NULL || target->tied_to != NULL || target->attachment) {
                rc = wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "alias '%s': target '%s' is not a "
                             "stored tensor", t->name, t->tied_to);
                goto free_input;
            }
            t->dtype = target->dtype;
            t->ndim = target->ndim;
            memcpy(t->shape, target->shape, sizeof t->shape);
        }
        pt[i].name = t->name;
        pt[i].dtype = t->dtype;
        pt[i].ndim = t->ndim;
        pt[i].shape = t->shape;
        pt[i].tied_to = t->tied_to;
        pt[i].attachment = t->attachment;
        if ((cx->srcs[i] = calloc(t->n_src ? t->n_src : 1, sizeof *cx->srcs[i])) == NULL ||
            (pf[i] = calloc(t->n_src ? t->n_src : 1, sizeof *pf[i])) == NULL) {
            wc_fail(s, rc, "out of memory");
            goto free_input;
        }
        for (size_t k = 0; k < t->n_src; k++) {
            cx->srcs[i][k] = t->src[k].data;
            pf[i][k].offset = t->src[k].offset;
            pf[i][k].shape = t->src[k].shape;
        }
        pt[i].fragments = t->whole ? NULL : pf[i];
        pt[i].n_fragments = t->whole ? 0 : t->n_src;
    }
    id.tenant_id = w->id.tenant_id;
    id.namespace_id = w->id.namespace_id;
    id.resource_id = w->id.resource_id;
    id.revision = w->id.revision;
    id.generation = w->id.generation;
    rc = wc_pack(&id, pt, w->n, s->payload_bytes, &cx->pack, err, sizeof err);
    if (rc < 0) {
        rc = wc_fail(s, rc == SMP_ENOMEM ? WEIGHT_ENOMEM : WEIGHT_EINVALID_ARGUMENT, "%s", err);
        goto free_input;
    }
    if (strcmp(cx->pack.manifest.group, w->group) != 0) {
        rc = wc_fail(s, WEIGHT_EPROTO, "the master's group key '%s' is not the canonical '%s'",
                     w->group, cx->pack.manifest.group);
        goto free_input;
    }
    for (size_t i = 0; i < w->n_meta; i++) {
        rc = wc_manifest_add_file_meta(&cx->pack.manifest, w->meta[i].key, w->meta[i].value, err,
                                       sizeof err);
        if (rc < 0) {
            rc = wc_fail(s, rc == SMP_ENOMEM ? WEIGHT_ENOMEM : WEIGHT_EINVALID_ARGUMENT, "%s", err);
            goto free_input;
        }
    }
    if (cx->pack.manifest.n_objects == 0) {
        rc = wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "a revision needs at least one non-empty tensor");
        goto free_input;
    }
    rc = WEIGHT_OK;
free_input:
    for (size_t i = 0; pf && i < w->n; i++) free(pf[i]);
    free(pf);
    free(pt);
    return rc;
}

/* The commit RPC with the sealed summary. */
static int send_commit(commit_ctx *cx, const uint8_t msha[32], weight_metadata *out)
{
    weight_writer *w = cx->w;
    weight_store *s = w->s;
    const wc_manifest *m = &cx->pack.manifest;
    Wmrpc__ImportCommitRequest req = WMRPC__IMPORT_COMMIT_REQUEST__INIT;
    Wmrpc__WeightIdentity wid;
    Wmrpc__MetadataResponse *r = NULL;
    char tenant[WEIGHT_ID_MAX + 1];
    uint8_t keys_sha[32], aff_sha[32];
    const char **keys = calloc(m->n_objects, sizeof *keys);
    Wmrpc__AffinityUnit *units = calloc(m->n_units ? m->n_units : 1, sizeof *units);
    Wmrpc__AffinityUnit **uptr = calloc(m->n_units ? m->n_units : 1, sizeof *uptr);
    char ***members = calloc(m->n_units ? m->n_units : 1, sizeof *members);
    uint64_t logical = 0;
    int rc = WEIGHT_ENOMEM;
    if (keys == NULL || units == NULL || uptr == NULL || members == NULL) {
        wc_fail(s, rc, "out of memory");
        goto free_all;
    }
    for (size_t i = 0; i < m->n_objects; i++) {
        keys[i] = m->objects[i].key;
        logical += m->objects[i].bytes;
    }
    for (size_t u = 0; u < m->n_units; u++) {
        wmrpc__affinity_unit__init(&units[u]);
        if ((members[u] = calloc(m->units[u].n ? m->units[u].n : 1, sizeof **members)) == NULL) {
            wc_fail(s, rc, "out of memory");
            goto free_all;
        }
        for (uint32_t j = 0; j < m->units[u].n; j++)
            members[u][j] = m->objects[m->units[u].objects[j]].key;
        units[u].n_members = m->units[u].n;
        units[u].members = members[u];
        units[u].logical_bytes = m->units[u].logical_bytes;
        uptr[u] = &units[u];
    }
    if (wc_payload_keys_digest(keys, m->n_objects, keys_sha) < 0 ||
        wc_affinity_digest(m, aff_sha) < 0) {
        rc = wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "payload keys cannot be digested");
        goto free_all;
    }
    wc_wire_identity(s, &w->id, &wid, tenant);
    req.identity = &wid;
    req.expected_metadata_generation = w->metadata_generation;
    req.payload_count = m->n_objects;
    req.logical_bytes = logical;
    req.payload_keys_sha256.data = keys_sha;
    req.payload_keys_sha256.len = 32;
    req.manifest_key = w->manifest_key;
    req.manifest_sha256.data = (uint8_t *)msha;
    req.manifest_sha256.len = 32;
    req.n_units = m->n_units;
    req.units = uptr;
    req.affinity_sha256.data = aff_sha;
    req.affinity_sha256.len = 32;
    rc = wc_call(s, &s->rpc, M(IMPORT_COMMIT), &req.base, &wmrpc__metadata_response__descriptor,
                 (ProtobufCMessage **)&r);
    if (rc == WEIGHT_OK) {
        if (out) wc_from_wire_metadata(r->metadata, out);
        wmrpc__metadata_response__free_unpacked(r, NULL);
    }
free_all:
    for (size_t u = 0; members && u < m->n_units; u++) free(members[u]);
    free(members);
    free(uptr);
    free(units);
    free(keys);
    return rc;
}

int weight_writer_commit(weight_writer *w, weight_metadata *out)
{
    commit_ctx cx;
    uint8_t *mbytes = NULL;
    size_t mlen = 0;
    uint8_t msha[32];
    int rc;
    if (w == NULL) return WEIGHT_EINVALID_ARGUMENT;
    weight_store *s = w->s;
    memset(&cx, 0, sizeof cx);
    cx.w = w;
    if (w->failed) {
        rc = WEIGHT_EINVALID_ARGUMENT; /* the add's message stays */
        goto abort_import;
    }
    s->err[0] = '\0';
    if (atomic_exchange(&s->cancel, 0)) { /* canceled before it began */
        rc = wc_fail(s, WEIGHT_ECANCELED, "weight_writer_commit canceled");
        goto abort_import;
    }
    {
        /* The object service's connection may be stale (a master restart
         * since the last call): probe it with a read and replace it if it
         * is gone, since put start itself is not repeated blindly. */
        int exists = 0;
        if ((kvc_exists(s->kv, w->manifest_key, &exists) < 0 && kvc_transport_failed(s->kv)) &&
            wc_kv_reconnect(s) < 0) {
            rc = wc_fail(s, WEIGHT_EIO, "master %s: cannot reconnect", s->master);
            goto abort_import;
        }
    }
    if ((rc = pack_tensors(&cx)) < 0) goto abort_import;
    wc_manifest *m = &cx.pack.manifest;
    for (size_t i = 0; i < m->n_objects; i++) cx.total += m->objects[i].bytes;
    wc_progress(s, 0, cx.total);
    unsigned agains = 0;
    if ((rc = write_objects(&cx, &agains)) < 0) {
        if (rc == WEIGHT_ECANCELED) atomic_store(&s->cancel, 0); /* consumed */
        goto abort_import;
    }
    if ((rc = wc_manifest_encode(m, &mbytes, &mlen)) < 0) {
        rc = wc_fail(s, WEIGHT_ENOMEM, "manifest: cannot encode");
        goto abort_import;
    }
    wc_manifest_sha256(mbytes, mlen, msha);
    for (;;) {
        uint64_t moves = kvc_moves(s->kv);
        rc = kvc_put_bytes(s->kv, w->manifest_key, mbytes, mlen, SMP_DATA_METADATA, w->group, 1,
                           NULL);
        if (revoked_dead_put(s, rc, w->manifest_key))
            rc = kvc_put_bytes(s->kv, w->manifest_key, mbytes, mlen, SMP_DATA_METADATA, w->group,
                               1, NULL);
        if (!put_again(s, rc, moves, &agains)) break;
    }
    if (rc < 0) {
        rc = wc_fail(s, rc, "manifest %s: %s", w->manifest_key,
                     kvc_error(s->kv));
        goto abort_import;
    }
    if ((rc = send_commit(&cx, msha, out)) < 0) goto abort_import;
    goto free_ctx;
abort_import:
    if (!w->keep_open) import_abort(w);
free_ctx:
    for (size_t i = 0; cx.srcs && i < w->n; i++) free((void *)cx.srcs[i]);
    free(cx.srcs);
    wc_pack_result_free(&cx.pack);
    free(mbytes);
    writer_free(w);
    return rc;
}
