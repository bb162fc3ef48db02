/* weight_get_mapped.c -- views in place: a revision's tensors as pointers
 * into this process's read-only mappings of the nodes' segment files.
 *
 * weight_get_mapped is the load without a transfer: it acquires the
 * revision lease and has its store's renewer keep it (wc_lease_keeper.c,
 * which the view may outlive the store with), reads and verifies the manifest, and hands out
 * pointers into its own read-only mapping of the segment files, after
 * verifying each object whole on first use (or ahead of use, on several
 * threads, weight_mapped_verify); weight_mapped_release ends it. The
 * mappings are shared by every view of the process and kept after the last
 * one goes (shared_seg).
 *
 * A view fails closed. Once its lease is lost -- a renewal refused, or none
 * got through by the lease's deadline (wc_lease_keeper.c) -- the master may
 * delete the revision and put other objects in its ranges, so the renewer
 * fences the view (view_fence) before that can happen: the pages of its
 * objects are replaced by inaccessible anonymous memory (PROT_NONE,
 * MAP_FIXED) in the shared mapping, and a stale read faults (SIGSEGV)
 * instead of returning another revision's bytes. A page that an object of
 * a live view of the process also lies on stays readable: the live view's
 * lease keeps it when that object is the same one (another store's view of
 * the revision); when it is another object sharing the page at an end
 * (objects are placed at 64-byte granularity), the page is frozen --
 * replaced by a private copy -- so the lost view's part keeps its own
 * bytes. The mapping is retired (no new view is given it; it is unmapped
 * with its last view), so a later view of the same bytes maps the segment
 * anew, and a live view released in it fences its pages in turn. */
#include <errno.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "wc_digest.h"
#include "wc_get.h"

#define M(name) WMRPC__WEIGHT_METHOD__WEIGHT_##name

/* The read-only mappings of segment files that views point into, shared by
 * every view of the process and kept after the last one goes: mapping a
 * segment anew per view would pay a page-table fill of the whole revision
 * per load, more than the copy weight_get makes. An unreferenced mapping is
 * dropped when its file is gone or replaced (a restarted node) -- checked
 * whenever a view takes one -- or when its slot is needed. A mapping a
 * fence made holes in is retired: never handed to a new view, unmapped
 * with its last reference. */
typedef struct shared_seg {
    char path[512];              /* seg_map_where: the file, or the node's socket */
    seg_map map;
    unsigned refs;
    int retired;                 /* a view was fenced in it (view_fence) */
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
        if (g->map.base == NULL || g->retired) continue;
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

/* Drop a reference (g_shared_lock held); a retired mapping goes with its
 * last one. */
static void shared_seg_put(shared_seg *g)
{
    if (g == NULL) return;
    if (--g->refs == 0 && g->retired) {
        seg_map_close(&g->map);
        g->retired = 0;
    }
}

static void shared_seg_release(shared_seg *g)
{
    if (g == NULL) return;
    pthread_mutex_lock(&g_shared_lock);
    shared_seg_put(g);
    pthread_mutex_unlock(&g_shared_lock);
}

/* A payload object as a view sees it: where its memory replica on this
 * host is mapped (seg NULL: nowhere), and whether its bytes were verified. */
typedef struct mapped_object {
    shared_seg *seg;
    uint64_t offset;             /* of the object in the segment */
    int state;                   /* 0 not verified yet, 1 verified, -1 failed */
    char node[64];               /* the replica's node and segment id (report_failed) */
    char segment[64];
} mapped_object;

struct weight_mapped {
    wc_lease_keeper k;           /* the revision lease; released with the view (first:
                                    view_fence is handed &k) */
    wc_manifest m;
    mapped_object *objs;         /* per payload object; objs[].seg and .offset are
                                    set under g_shared_lock (view_fence reads them) */
    pthread_mutex_t lock;        /* verification: objs[].state */
    unsigned threads;            /* the store's WEIGHT_OPT_THREADS */
    /* g_shared_lock's: */
    struct weight_mapped *next;  /* in g_views once its objects may be located */
    int listed;
    int fenced;                  /* its lease is lost: its pages are (being) fenced */
    int fence_errno;             /* a fence mmap and mprotect both failed: their errno */
};

/* Every view of the process whose objects may point into g_shared
 * (g_shared_lock): a fence leaves the pages the live ones cover readable. */
static weight_mapped *g_views;

/* The storage fragment of tensor i when it is the whole tensor in one
 * piece (what a view can point at), else NULL. */
static const wc_fragment *whole_fragment(const wc_manifest *m, size_t i)
{
    const wc_tensor *t = &m->tensors[m->tensors[i].storage];
    if (t->frag_count != 1 || t->bytes == 0) return NULL;
    const wc_fragment *f = &m->fragments[t->frag_first];
    return f->bytes == t->bytes ? f : NULL;
}

/* 1 when chunks [c0, c1) of object o at `bytes` match the manifest; an
 * object without chunk sums is checked whole against its SHA-256 (c0 0). */
static int verify_chunks(const wc_object *o, const uint8_t *bytes, size_t c0, size_t c1)
{
    if (o->n_chunks == 0) {
        uint8_t sha[32];
        if (!o->has_sha256) return 1;
        SHA256(bytes, (size_t)o->bytes, sha);
        return memcmp(sha, o->sha256, 32) == 0;
    }
    for (size_t c = c0; c < c1; c++) {
        uint64_t a = c * o->chunk_bytes;
        uint64_t b = a + o->chunk_bytes < o->bytes ? a + o->chunk_bytes : o->bytes;
        if (wc_xxh3(bytes + a, (size_t)(b - a)) != o->chunk_xxh3[c]) return 0;
    }
    return 1;
}

/* Find where object `index` has a memory replica this process can map, and
 * take a reference on that mapping (none found: mo->seg stays NULL). A view
 * fenced meanwhile gets none. A failed replica lookup other than "missing"
 * is returned. */
static int locate_object(weight_store *s, weight_mapped *v, uint32_t index, mapped_object *mo)
{
    const wc_object *o = &v->m.objects[index];
    kvc_object obj;
    int rc = wc_kv_get(s, o->key, &obj);
    if (rc == SMP_ENOTFOUND) return WEIGHT_OK;
    if (rc < 0) return wc_fail(s, rc, "payload %s: %s", o->key, kvc_error(s->kv));
    if (obj.size != o->bytes || (o->has_sha256 && memcmp(obj.sha256, o->sha256, 32) != 0))
        return WEIGHT_OK; /* not the manifest's object: weight_get reports it */
    for (size_t r = 0; r < obj.n_replicas && mo->seg == NULL; r++) {
        const kvc_replica *rep = &obj.replicas[r];
        if (rep->kind != SMP_REPLICA_MEMORY) continue;
        shared_seg *g = shared_seg_acquire(rep);
        if (g == NULL) continue;
        pthread_mutex_lock(&g_shared_lock);
        /* a mapping retired since it was taken has holes: map it anew */
        for (int tries = 0; g != NULL && g->retired && tries < 2; tries++) {
            shared_seg_put(g);
            pthread_mutex_unlock(&g_shared_lock);
            g = shared_seg_acquire(rep);
            pthread_mutex_lock(&g_shared_lock);
        }
        if (g == NULL || g->retired || v->fenced || rep->offset > g->map.size ||
            o->bytes > g->map.size - rep->offset) {
            if (g != NULL) shared_seg_put(g);
            pthread_mutex_unlock(&g_shared_lock);
            continue;
        }
        mo->seg = g;
        mo->offset = rep->offset;
        snprintf(mo->node, sizeof mo->node, "%s", rep->node);
        snprintf(mo->segment, sizeof mo->segment, "%s", rep->segment);
        pthread_mutex_unlock(&g_shared_lock);
    }
    return WEIGHT_OK;
}

/* -- the fence ---------------------------------------------------------------- */

/* Pages [*p0, *p1) of object mo (of o's bytes) in its mapping. */
static void object_pages(const mapped_object *mo, uint64_t bytes, uint64_t *p0, uint64_t *p1)
{
    uint64_t page = mo->seg->map.page;
    *p0 = mo->offset / page;
    *p1 = (mo->offset + bytes + page - 1) / page;
}

/* Replace pages [p0, p1) of g by a private read-only copy of what they
 * hold now, in one step (mremap over them: a reader never finds a hole).
 * 0, or the errno (the pages are left as they were). */
static int freeze_pages(shared_seg *g, uint64_t p0, uint64_t p1)
{
    uint8_t *at = g->map.base + p0 * g->map.page;
    size_t len = (size_t)((p1 - p0) * g->map.page);
    void *copy = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) return errno;
    memcpy(copy, at, len);
    if (mprotect(copy, len, PROT_READ) != 0 ||
        mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
        int e = errno;
        munmap(copy, len);
        return e;
    }
    return 0;
}

/* Make pages [p0, p1) of g, which object (offset, bytes) of the lost view
 * `self` lies on, inaccessible (g_shared_lock held) -- but for the pages
 * an object of a live view lies on too. Those of the same object stay as
 * they are (the live view's lease keeps the bytes there); those of another
 * object (a page the two share at an end) are frozen: replaced by a private
 * copy, so the live view reads on and self's part of the page keeps its
 * own bytes, never those of what the master puts in its range later. 0,
 * or the errno of a piece that could be fenced neither by mmap nor by
 * mprotect, or not frozen. */
static int fence_pages(shared_seg *g, uint64_t p0, uint64_t p1, uint64_t offset, uint64_t bytes,
                       const weight_mapped *self)
{
    if (p0 >= p1) return 0;
    for (const weight_mapped *w = g_views; w != NULL; w = w->next) {
        if (w == self || w->fenced) continue;
        for (size_t o = 0; o < w->m.n_objects; o++) {
            const mapped_object *mo = &w->objs[o];
            uint64_t q0, q1;
            if (mo->seg != g) continue;
            object_pages(mo, w->m.objects[o].bytes, &q0, &q1);
            if (q1 <= p0 || q0 >= p1) continue;
            uint64_t m0 = q0 > p0 ? q0 : p0, m1 = q1 < p1 ? q1 : p1;
            int a = fence_pages(g, p0, m0, offset, bytes, self);
            int b = fence_pages(g, m1, p1, offset, bytes, self);
            int c = mo->offset == offset && w->m.objects[o].bytes == bytes
                        ? 0
                        : freeze_pages(g, m0, m1);
            return a ? a : b ? b : c;
        }
    }
    uint8_t *at = g->map.base + p0 * g->map.page;
    size_t len = (size_t)((p1 - p0) * g->map.page);
    if (mmap(at, len, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) !=
        MAP_FAILED)
        return 0;
    return mprotect(at, len, PROT_NONE) == 0 ? 0 : errno;
}

/* The keeper's on_lost (the renewer's threads): fence view k's objects in
 * their mappings -- every page they touch that no live view of the process
 * reads too -- and retire those mappings. A view still being made is marked
 * fenced (it gets no more objects, and weight_get_mapped fails). */
static void view_fence(wc_lease_keeper *k)
{
    weight_mapped *v = (weight_mapped *)k;
    pthread_mutex_lock(&g_shared_lock);
    v->fenced = 1;
    for (size_t o = 0; v->listed && o < v->m.n_objects; o++) {
        mapped_object *mo = &v->objs[o];
        uint64_t p0, p1;
        if (mo->seg == NULL) continue;
        object_pages(mo, v->m.objects[o].bytes, &p0, &p1);
        int e = fence_pages(mo->seg, p0, p1, mo->offset, v->m.objects[o].bytes, v);
        if (e != 0 && v->fence_errno == 0) v->fence_errno = e;
        mo->seg->retired = 1;
    }
    pthread_mutex_unlock(&g_shared_lock);
}

/* A live view v being released gives up, in retired mappings, the pages
 * it kept readable for itself: a lost view fenced earlier left out the
 * pages v covers, and once v is gone no live view may read them (its own
 * pointers are invalid after the release anyway). */
static void view_fence_on_release(weight_mapped *v)
{
    pthread_mutex_lock(&g_shared_lock);
    for (size_t o = 0; v->listed && !v->fenced && o < v->m.n_objects; o++) {
        mapped_object *mo = &v->objs[o];
        uint64_t p0, p1;
        if (mo->seg == NULL || !mo->seg->retired) continue;
        object_pages(mo, v->m.objects[o].bytes, &p0, &p1);
        (void)fence_pages(mo->seg, p0, p1, mo->offset, v->m.objects[o].bytes, v);
    }
    pthread_mutex_unlock(&g_shared_lock);
}

/* Take v into (listed) or out of g_views. */
static void view_list(weight_mapped *v, int listed)
{
    pthread_mutex_lock(&g_shared_lock);
    if (listed && !v->listed) {
        v->next = g_views;
        g_views = v;
    } else if (!listed && v->listed) {
        for (weight_mapped **p = &g_views; *p != NULL; p = &(*p)->next)
            if (*p == v) {
                *p = v->next;
                break;
            }
    }
    v->listed = listed;
    pthread_mutex_unlock(&g_shared_lock);
}

void weight_mapped_release(weight_mapped *v)
{
    if (v == NULL) return;
    wc_lease_keeper_stop(&v->k, 1); /* waits for a fence of v in flight */
    view_fence_on_release(v);
    view_list(v, 0);
    pthread_mutex_destroy(&v->lock);
    for (size_t i = 0; v->objs != NULL && i < v->m.n_objects; i++) shared_seg_release(v->objs[i].seg);
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
    int rc;

    if (s == NULL) return WEIGHT_EINVALID_ARGUMENT;
    s->err[0] = '\0';
    if (out == NULL || id == NULL || !id->namespace_id[0] || !id->resource_id[0] || !id->revision[0])
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "weight_get_mapped: incomplete identity");
    *out = NULL;
    snprintf(tenant, sizeof tenant, "%s", id->tenant_id[0] ? id->tenant_id : s->tenant);
    if ((v = calloc(1, sizeof *v)) == NULL) return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
    v->threads = s->threads;
    pthread_mutex_init(&v->lock, NULL);

    /* The lease, acquired on the caller's connection; renewed and released
     * on the store's renewer's, which fences the view once the lease is
     * lost. Its TTL is asked explicitly (the server's default otherwise):
     * the fence's deadline counts it from the acquire's send. */
    uint64_t ttl = s->lease_ttl_ms ? s->lease_ttl_ms : WC_VIEW_LEASE_TTL_MS;
    v->k.asked_ms = wc_mono_ms();
    rc = wc_lease_call(s, &s->rpc, M(LEASE_ACQUIRE), id, 0, 0, ttl, &lr);
    if (rc < 0) goto free_view;
    if (lr->lease == NULL || lr->lease->id == 0 || lr->metadata == NULL) {
        wmrpc__lease_response__free_unpacked(lr, NULL);
        rc = wc_fail(s, WEIGHT_EPROTO, "lease reply without lease or metadata");
        goto free_view;
    }
    v->k.id = *id;
    v->k.lease_id = lr->lease->id;
    v->k.lease_gen = lr->lease->metadata_generation;
    v->k.ttl_ms = ttl;
    v->k.interval_ms = wc_lease_renew_interval(s, lr->lease->expires_ms);
    v->k.on_lost = view_fence;
    wc_from_wire_metadata(lr->metadata, &md);
    wmrpc__lease_response__free_unpacked(lr, NULL);
    if ((rc = wc_lease_keeper_start(s, &v->k)) < 0) {
        char saved[sizeof s->err];
        memcpy(saved, s->err, sizeof saved);
        (void)wc_lease_call(s, &s->rpc, M(LEASE_RELEASE), id, v->k.lease_id, 0, 0, NULL);
        memcpy(s->err, saved, sizeof saved);
        goto free_view;
    }

    /* The manifest, verified; then where each object that holds a whole
     * tensor lies on this host (verified on first use, weight_mapped_data). */
    if ((rc = wc_load_manifest(s, &md, tenant, id, &v->m)) < 0) goto free_view;
    if ((v->objs = calloc(v->m.n_objects ? v->m.n_objects : 1, sizeof *v->objs)) == NULL) {
        rc = wc_fail(s, WEIGHT_ENOMEM, "out of memory");
        goto free_view;
    }
    view_list(v, 1); /* a fence from now on sees the objects it locates */
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
    if ((rc = atomic_load(&v->k.lost)) < 0) { /* fenced while being made */
        rc = wc_fail(s, rc, "%s", v->k.lost_msg);
        goto free_view;
    }
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
    wc_tensor_info(&v->m, i, &ti);
    out->name = ti.name;
    out->dtype = ti.dtype;
    out->item_size = ti.item_size;
    out->ndim = ti.ndim;
    out->shape = ti.shape;
    out->alias_of = ti.alias_of;
    out->bytes = v->m.tensors[i].bytes;
    return WEIGHT_OK;
}

/* Object `object` of v failed its verification: report its replica to the
 * master, which has the node hash it and drops it only when it really is
 * corrupt (the plugin then repairs it). Best effort, outside v->lock; the
 * object's tensors stay unreadable in place whatever the answer. */
static void report_failed(weight_mapped *v, size_t object)
{
    const mapped_object *mo = &v->objs[object];
    (void)wc_lease_keeper_report_corrupt(&v->k, v->m.objects[object].key, mo->node, mo->segment,
                                         mo->offset);
}

int weight_mapped_data(weight_mapped *v, size_t i, const void **data)
{
    if (v == NULL || data == NULL || i >= wc_manifest_n_plain(&v->m)) return WEIGHT_EINVALID_ARGUMENT;
    *data = NULL;
    const wc_fragment *f = whole_fragment(&v->m, i);
    if (f == NULL) return WEIGHT_OK;
    mapped_object *mo = &v->objs[f->object];
    const wc_object *o = &v->m.objects[f->object];
    int lost = atomic_load(&v->k.lost);
    if (lost < 0) return lost; /* fenced, or about to be: nothing to hand out */
    int failed = 0;
    pthread_mutex_lock(&v->lock);
    if (mo->state == 0 && mo->seg != NULL) {
        seg_map_prefault(&mo->seg->map, mo->offset, o->bytes);
        mo->state = verify_chunks(o, mo->seg->map.base + mo->offset, 0, o->n_chunks) ? 1 : -1;
        failed = mo->state == -1;
    }
    if (mo->state == 1) *data = mo->seg->map.base + mo->offset + f->object_offset;
    pthread_mutex_unlock(&v->lock);
    if (failed) report_failed(v, f->object);
    return WEIGHT_OK;
}

/* -- verification ahead of use, on several threads ---------------------------- */

/* A part of an object to verify: chunks [c0, c1); an object without chunk
 * sums is one part, checked whole against its SHA-256. */
typedef struct verify_part {
    uint32_t object;
    size_t c0, c1;
} verify_part;

typedef struct verify_pool {
    weight_mapped *v;
    const verify_part *parts;
    size_t n_parts;
    atomic_size_t next;          /* the next part a thread takes */
    atomic_uchar *failed;        /* per object: one of its parts did not match */
} verify_pool;

/* A verifying thread (the caller's too): takes parts until none is left,
 * populating each part's pages before hashing them. */
static void *verify_main(void *arg)
{
    verify_pool *p = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_parts) break;
        const verify_part *vp = &p->parts[i];
        if (atomic_load_explicit(&p->failed[vp->object], memory_order_relaxed)) continue;
        const mapped_object *mo = &p->v->objs[vp->object];
        const wc_object *o = &p->v->m.objects[vp->object];
        uint64_t a = vp->c0 * o->chunk_bytes;
        uint64_t b = o->n_chunks == 0 || vp->c1 * o->chunk_bytes > o->bytes ? o->bytes
                                                                           : vp->c1 * o->chunk_bytes;
        seg_map_prefault(&mo->seg->map, mo->offset + a, b - a);
        if (!verify_chunks(o, mo->seg->map.base + mo->offset, vp->c0, vp->c1))
            atomic_store(&p->failed[vp->object], 1);
    }
    return NULL;
}

/* The parts of the objects marked in want, in object order, each of at most
 * WC_MAPPED_JOB_CHUNKS chunks. *n: how many; NULL when out of memory. */
static verify_part *cut_parts(const wc_manifest *m, const unsigned char *want, size_t *n)
{
    size_t count = 0, k = 0;
    for (size_t o = 0; o < m->n_objects; o++)
        if (want[o])
            count += m->objects[o].n_chunks == 0
                         ? 1
                         : (m->objects[o].n_chunks + WC_MAPPED_JOB_CHUNKS - 1) / WC_MAPPED_JOB_CHUNKS;
    verify_part *parts = calloc(count ? count : 1, sizeof *parts);
    if (parts == NULL) return NULL;
    for (size_t o = 0; o < m->n_objects; o++) {
        if (!want[o]) continue;
        size_t n_chunks = m->objects[o].n_chunks;
        if (n_chunks == 0) parts[k++] = (verify_part){(uint32_t)o, 0, 0};
        for (size_t c = 0; c < n_chunks; c += WC_MAPPED_JOB_CHUNKS)
            parts[k++] = (verify_part){(uint32_t)o, c,
                                       c + WC_MAPPED_JOB_CHUNKS < n_chunks ? c + WC_MAPPED_JOB_CHUNKS
                                                                           : n_chunks};
    }
    *n = count;
    return parts;
}

int weight_mapped_verify(weight_mapped *v, const size_t *tensors, size_t n)
{
    unsigned char *want = NULL;
    atomic_uchar *failed = NULL;
    verify_part *parts = NULL;
    verify_pool pool = {.v = v};
    pthread_t threads[WC_MAX_THREADS];
    size_t n_parts = 0, n_plain;
    unsigned started = 0;
    int rc = WEIGHT_OK;

    if (v == NULL) return WEIGHT_EINVALID_ARGUMENT;
    if ((rc = atomic_load(&v->k.lost)) < 0) return rc; /* fenced: nothing to read */
    n_plain = wc_manifest_n_plain(&v->m);
    if (tensors == NULL) n = n_plain;
    for (size_t i = 0; tensors != NULL && i < n; i++)
        if (tensors[i] >= n_plain) return WEIGHT_EINVALID_ARGUMENT;

    pthread_mutex_lock(&v->lock);
    want = calloc(v->m.n_objects ? v->m.n_objects : 1, 1);
    failed = calloc(v->m.n_objects ? v->m.n_objects : 1, sizeof *failed);
    if (want == NULL || failed == NULL) {
        rc = WEIGHT_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const wc_fragment *f = whole_fragment(&v->m, tensors != NULL ? tensors[i] : i);
        if (f != NULL && v->objs[f->object].state == 0 && v->objs[f->object].seg != NULL)
            want[f->object] = 1;
    }
    if ((parts = cut_parts(&v->m, want, &n_parts)) == NULL) {
        rc = WEIGHT_ENOMEM;
        goto out;
    }
    if (n_parts == 0) goto out;

    /* The caller verifies too; a thread that cannot be started leaves its
     * share to the others. v->threads is at most WC_MAX_THREADS
     * (weight_store_set_option). */
    pool.parts = parts;
    pool.n_parts = n_parts;
    pool.failed = failed;
    atomic_init(&pool.next, 0);
    for (unsigned t = 1; t < v->threads && t < n_parts; t++) {
        if (pthread_create(&threads[started], NULL, verify_main, &pool) != 0) break;
        started++;
    }
    verify_main(&pool);
    for (unsigned t = 0; t < started; t++) pthread_join(threads[t], NULL);
    for (size_t o = 0; o < v->m.n_objects; o++)
        if (want[o]) v->objs[o].state = atomic_load(&failed[o]) ? -1 : 1;
out:
    pthread_mutex_unlock(&v->lock);
    for (size_t o = 0; rc == WEIGHT_OK && want != NULL && o < v->m.n_objects; o++)
        if (want[o] && atomic_load(&failed[o])) report_failed(v, o);
    free(parts);
    free(failed);
    free(want);
    return rc;
}

int weight_mapped_status(const weight_mapped *v)
{
    return v ? atomic_load(&v->k.lost) : WEIGHT_EINVALID_ARGUMENT;
}
