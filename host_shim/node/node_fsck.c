/* node_fsck.c -- the fsck tasks a node runs for the master (node_fsck.h).
 *
 * SCAN lists every .cold file of the cold directory, corrupt ones included,
 * and the non-zero 64-byte blocks of the segment ranges the master says
 * nothing occupies; SCRUB zeroes ranges the master holds for it. Both run
 * on the node's task thread, one at a time.
 *
 * A cold tier of a million files does not fit one answer, so a master asks
 * in pages (NodeTask.page_bytes): the first page lists the directory's names
 * once, sorted, and keeps the listing; each page answers with the names after
 * the task's `after`, their headers read then, as many as keep the encoded
 * answer within page_bytes, and says whether more follow. The listing is
 * dropped with the last page (or replaced by the next first page), so a file
 * made after the first page is not seen -- as one made after a one-answer
 * scan's directory read is not. A master from before pages (page_bytes 0)
 * gets every file in one answer.
 *
 * A deep SCAN (NodeTask.deep, fsck --deep) also hashes each file's data
 * against its header's SHA-256 and reports a mismatch as corrupt; its
 * pages also end once some SCAN_DEEP_BYTES were read (NodeTask.deep_bytes
 * when smaller: the background fsck's pace), so one task stays seconds
 * long, and its answer says it was deep (TaskResult.deep).
 *
 * Temporary cold files older than a minute (writes a crash cut off) are
 * reported with the first page (or the one answer): named, sized, aged, as
 * many as half a page has room for (SCAN_TMPS_NAMED at most), every one
 * counted. A SCAN deletes them only when asked (NodeTask.remove_stale_tmp,
 * fsck --repair); a plain check leaves the directory as it found it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node_cold.h"
#include "node_fsck.h"
#include "node_rpc.pb-c.h"
#include "node_segment.h"
#include "wm_errbuf.h"

#define SCAN_BLOCK 64          /* fsck: OBJ_ALIGN, the master allocates in these */
#define SCAN_CHUNK (1u << 20)  /* fsck: bytes read at a time */
#define SCAN_STALE_TMP_MS 60000 /* temporary files older than this are a dead persist's */
#define SCAN_RESULT_SLACK 16    /* a page's bytes for status and more, set after it is measured */
#define SCAN_DEEP_BYTES (1ull << 30) /* a deep page ends once it hashed this much data */
#define SCAN_TMPS_NAMED 100     /* stale temporary files an answer names at most */

struct node_fsck {
    seg_segment *seg;                 /* borrowed */
    cold_tier *cold;                  /* borrowed */
    const char *cold_dir;             /* borrowed */
    char **names;                     /* a paged scan's sorted listing (NULL: none held) */
    size_t n_names;
    uint8_t scan_buf[SCAN_CHUNK];     /* fsck scans read through it */
};

static void drop_listing(node_fsck *n)
{
    cold_names_free(n->names, n->n_names);
    n->names = NULL;
    n->n_names = 0;
}

int node_fsck_new(seg_segment *seg, cold_tier *cold, const char *cold_dir, node_fsck **out)
{
    node_fsck *n = calloc(1, sizeof(*n));
    *out = NULL;
    if (n == NULL) return SMP_ENOMEM;
    n->seg = seg;
    n->cold = cold;
    n->cold_dir = cold_dir;
    *out = n;
    return SMP_OK;
}

void node_fsck_free(node_fsck *n)
{
    if (n == NULL) return;
    drop_listing(n);
    free(n);
}

/* Append [off, off+len) to r->dirty, joining it to the last range when they
 * touch. SMP_OK or SMP_ENOMEM. */
static int add_dirty(TaskResult *r, size_t *cap, uint64_t off, uint64_t len)
{
    if (r->n_dirty > 0) {
        SegmentRange *last = r->dirty[r->n_dirty - 1];
        if (last->offset + last->length == off) {
            last->length += len;
            return SMP_OK;
        }
    }
    if (r->n_dirty == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        SegmentRange **v = realloc(r->dirty, ncap * sizeof(*v));
        if (v == NULL) return SMP_ENOMEM;
        r->dirty = v;
        *cap = ncap;
    }
    SegmentRange *g = malloc(sizeof(*g));
    if (g == NULL) return SMP_ENOMEM;
    segment_range__init(g);
    g->offset = off;
    g->length = len;
    r->dirty[r->n_dirty++] = g;
    return SMP_OK;
}

/* 1 when the len bytes at p are all zero: eight bytes at a time. */
static int all_zero(const uint8_t *p, uint64_t len)
{
    uint64_t acc = 0, w;
    uint64_t b = 0;
    for (; b + 8 <= len; b += 8) {
        memcpy(&w, p + b, 8);
        acc |= w;
    }
    for (; b < len; b++) acc |= p[b];
    return acc == 0;
}

/* Check [off, off+len) (inside one range the master says nothing
 * occupies) block by block, read with pread into the scan buffer -- or
 * straight through the mapping where the segment's pre-fault already
 * touched it (node.segment_prefault: those pages hold data, not holes, and
 * the mapping is what is cheap to read on a shadow-paged guest). */
static int scan_piece(node_fsck *n, TaskResult *r, size_t *cap, uint64_t off, uint64_t len)
{
    uint64_t at = 0;
    while (at < len) {
        uint64_t chunk = len - at < SCAN_CHUNK ? len - at : SCAN_CHUNK;
        const uint8_t *p = n->scan_buf;
        if (seg_prefaulted(n->seg) >= off + at + chunk) p = seg_ptr(n->seg, off + at, chunk);
        else if (seg_pread(n->seg, off + at, n->scan_buf, chunk) != SMP_OK) return SMP_EIO;
        if (p == NULL) return SMP_EIO;
        for (uint64_t b = 0; b < chunk; b += SCAN_BLOCK) {
            uint64_t bl = chunk - b < SCAN_BLOCK ? chunk - b : SCAN_BLOCK;
            if (!all_zero(p + b, bl) && add_dirty(r, cap, off + at + b, bl) < 0)
                return SMP_ENOMEM;
        }
        at += chunk;
    }
    return SMP_OK;
}

#define SCAN_RUNS 4096

/* The non-zero SCAN_BLOCK blocks of each range the master says nothing
 * occupies (ranges outside the segment are refused). Runs the file system
 * reports as holes read as zeros and are skipped, so a segment never written
 * is not read. The runs are listed before anything is read: on tmpfs,
 * reading reserved pages turns the holes after them into data, and a scan
 * that asked as it went would end up reading the whole segment. The scan
 * runs between two polls: it must stay well inside node.timeout_ms. */
static int scan_ranges(node_fsck *n, const NodeTask *t, TaskResult *r, char *err, size_t errlen)
{
    size_t cap = 0, n_runs = 0;
    uint64_t (*runs)[2] = malloc(SCAN_RUNS * sizeof(*runs));
    uint64_t pos = 0, ds, de, size = seg_size(n->seg);
    int rc = SMP_OK;
    if (runs == NULL) return SMP_ENOMEM;
    while (pos < size && seg_next_data(n->seg, pos, &ds, &de) == SMP_OK) {
        if (n_runs == SCAN_RUNS - 1) { /* too fragmented: the rest is one run */
            de = size;
        }
        runs[n_runs][0] = ds;
        runs[n_runs][1] = de;
        n_runs++;
        pos = de;
    }
    for (size_t i = 0; rc == SMP_OK && i < t->n_ranges; i++) {
        const SegmentRange *g = t->ranges[i];
        if (seg_check_range(n->seg, g->offset, g->length) != SMP_OK) {
            wm_errbuf(err, errlen, "scan: range %llu+%llu outside the segment",
                      (unsigned long long)g->offset, (unsigned long long)g->length);
            rc = SMP_ERANGE;
            break;
        }
        uint64_t end = g->offset + g->length;
        for (size_t k = 0; rc == SMP_OK && k < n_runs; k++) {
            /* the run widened to whole blocks of the range, clipped to it */
            uint64_t a = runs[k][0] > g->offset ? runs[k][0] : g->offset;
            uint64_t b = runs[k][1] < end ? runs[k][1] : end;
            if (a >= b) continue;
            a = g->offset + (a - g->offset) / SCAN_BLOCK * SCAN_BLOCK;
            b = g->offset + (b - g->offset + SCAN_BLOCK - 1) / SCAN_BLOCK * SCAN_BLOCK;
            if (b > end) b = end;
            rc = scan_piece(n, r, &cap, a, b - a);
            if (rc == SMP_EIO)
                wm_errbuf(err, errlen, "scan: cannot read %llu bytes at %llu",
                          (unsigned long long)(b - a), (unsigned long long)a);
        }
    }
    free(runs);
    return rc;
}

typedef struct scan_files {
    TaskResult *r;
    size_t cap;
} scan_files;

/* Every .cold file, corrupt ones included (key "", no checksum). */
static int scan_file(void *arg, const cold_entry *e)
{
    scan_files *sf = arg;
    TaskResult *r = sf->r;
    if (r->n_files == sf->cap) {
        size_t cap = sf->cap ? sf->cap * 2 : 64;
        InventoryFile **v = realloc(r->files, cap * sizeof(*v));
        if (v == NULL) return SMP_ENOMEM;
        r->files = v;
        sf->cap = cap;
    }
    InventoryFile *f = calloc(1, sizeof(*f));
    if (f == NULL) return SMP_ENOMEM;
    inventory_file__init(f);
    r->files[r->n_files++] = f;
    f->name = strdup(e->name);
    f->key = strdup(e->status == SMP_OK && e->key ? e->key : "");
    f->length = e->status == SMP_OK ? e->length : e->file_bytes;
    if (f->name == NULL || f->key == NULL) return SMP_ENOMEM;
    if (e->status == SMP_OK) {
        if ((f->sha256.data = malloc(32)) == NULL) return SMP_ENOMEM;
        memcpy(f->sha256.data, e->sha256, 32);
        f->sha256.len = 32;
    }
    return 0;
}

/* The stale temporary files of the answer r being made. */
typedef struct tmp_report {
    TaskResult *r;
    size_t cap;
    int failed;         /* out of memory: the rest are counted, not named */
} tmp_report;

static void free_tmp(StaleTempFile *f)
{
    free(f->name);
    free(f->error);
    free(f);
}

/* cold_tmp_fn: count t in the answer, and name it while SCAN_TMPS_NAMED are not. */
static void note_tmp(void *arg, const cold_stale_tmp *t)
{
    tmp_report *tr = arg;
    TaskResult *r = tr->r;
    r->stale_tmps_total++;
    r->stale_tmp_bytes_total += t->bytes;
    r->stale_tmps_removed += t->removed != 0;
    if (tr->failed || r->n_stale_tmps >= SCAN_TMPS_NAMED) return;
    if (r->n_stale_tmps == tr->cap) {
        size_t cap = tr->cap ? tr->cap * 2 : 8;
        StaleTempFile **v = realloc(r->stale_tmps, cap * sizeof(*v));
        if (v == NULL) {
            tr->failed = 1;
            return;
        }
        r->stale_tmps = v;
        tr->cap = cap;
    }
    StaleTempFile *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        tr->failed = 1;
        return;
    }
    stale_temp_file__init(f);
    f->name = strdup(t->name);
    f->error = strdup(t->error ? strerror(t->error) : "");
    f->bytes = t->bytes;
    f->age_s = t->age_ms / 1000;
    f->removed = t->removed != 0;
    if (f->name == NULL || f->error == NULL) {
        free_tmp(f);
        tr->failed = 1;
        return;
    }
    r->stale_tmps[r->n_stale_tmps++] = f;
}

/* The rule of t's walk of the directory: report the stale temporaries into
 * tr (report: the first page, or the one answer) and delete them only when
 * the task asks (fsck --repair). A listing made again mid-scan neither
 * reports nor deletes. */
static cold_tmp_rule tmp_rule(const NodeTask *t, tmp_report *tr, int report)
{
    cold_tmp_rule rule = {.stale_ms = SCAN_STALE_TMP_MS, .keep = 1};
    if (report) {
        rule.keep = !t->remove_stale_tmp;
        rule.fn = note_tmp;
        rule.arg = tr;
        tr->r->tmp_reported = 1;
    }
    return rule;
}

/* Every .cold file and the dirty blocks in one answer (a master from
 * before pages). */
static int scan_whole(node_fsck *n, const NodeTask *t, TaskResult *r, char *err, size_t errlen)
{
    scan_files sf = {r, 0};
    tmp_report tr = {r, 0, 0};
    cold_tmp_rule rule = tmp_rule(t, &tr, 1);
    int rc = cold_inventory_tmps(n->cold, &rule, t->deep, scan_file, &sf, NULL);
    r->deep = t->deep;
    if (rc != SMP_OK) {
        wm_errbuf(err, errlen, "scan of %s: %s", n->cold_dir, smp_strerror(rc));
        return rc < 0 ? rc : SMP_EIO;
    }
    return scan_ranges(n, t, r, err, errlen);
}

/* Bytes of v as a protobuf varint. */
static size_t varint_bytes(uint64_t v)
{
    size_t k = 1;
    for (; v >= 128; v >>= 7) k++;
    return k;
}

/* Take the last file off r (it did not fit the page). */
static void drop_last_file(TaskResult *r)
{
    InventoryFile *f = r->files[--r->n_files];
    free(f->name);
    free(f->key);
    free(f->sha256.data);
    free(f);
}

/* The files of one page: those of the listing after t->after (the listing
 * made anew on a first page, or when none is held), headers read now, while
 * r stays within t->page_bytes; r->more when names are left. */
static int page_files(node_fsck *n, const NodeTask *t, TaskResult *r, char *err, size_t errlen)
{
    int rc;
    char key_buf[COLD_KEY_MAX + 1], name_buf[COLD_NAME_MAX];
    scan_files sf = {r, 0};
    size_t used = task_result__get_packed_size(r) + SCAN_RESULT_SLACK;
    if (used > t->page_bytes) {
        wm_errbuf(err, errlen, "scan: the non-zero blocks of the free segment ranges make %zu "
                  "ranges, more than a page of %u bytes carries", r->n_dirty, (unsigned)t->page_bytes);
        return SMP_ERANGE;
    }
    if (t->after[0] == '\0' || n->names == NULL) {
        tmp_report tr = {r, 0, 0};
        cold_tmp_rule rule = tmp_rule(t, &tr, t->after[0] == '\0');
        drop_listing(n);
        if ((rc = cold_list_names_tmps(n->cold, &rule, &n->names, &n->n_names)) != SMP_OK) {
            wm_errbuf(err, errlen, "scan of %s: %s", n->cold_dir, smp_strerror(rc));
            return rc < 0 ? rc : SMP_EIO;
        }
        /* the named temporaries take half a page at most (all stay counted) */
        while (r->n_stale_tmps > 0 &&
               task_result__get_packed_size(r) + SCAN_RESULT_SLACK > t->page_bytes / 2)
            free_tmp(r->stale_tmps[--r->n_stale_tmps]);
        used = task_result__get_packed_size(r) + SCAN_RESULT_SLACK;
    }
    size_t lo = 0, hi = n->n_names; /* the first name after t->after */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(n->names[mid], t->after) <= 0) lo = mid + 1;
        else hi = mid;
    }
    uint64_t hashed = 0;
    uint64_t deep_bytes = t->deep_bytes > 0 && t->deep_bytes < SCAN_DEEP_BYTES ? t->deep_bytes
                                                                              : SCAN_DEEP_BYTES;
    for (size_t i = lo; i < n->n_names; i++) {
        cold_entry e;
        if (t->deep && hashed >= deep_bytes && r->n_files > 0) {
            r->more = 1; /* a page of deep checks stays some 1 GiB (or as asked) of reading long */
            return SMP_OK;
        }
        rc = cold_check(n->cold, n->names[i], t->deep, &e, key_buf, name_buf);
        if (rc == SMP_ENOTFOUND) continue; /* deleted meanwhile */
        if (rc == SMP_EINVAL || rc == SMP_ENOMEM) return rc == SMP_EINVAL ? SMP_EIO : rc;
        if ((rc = scan_file(&sf, &e)) != 0) return rc; /* corrupt ones too (status says) */
        size_t sz = inventory_file__get_packed_size(r->files[r->n_files - 1]);
        size_t entry = 1 + varint_bytes(sz) + sz;
        if (used + entry <= t->page_bytes) {
            used += entry;
            hashed += e.length;
            continue;
        }
        drop_last_file(r);
        if (r->n_files == 0) {
            wm_errbuf(err, errlen, "scan: cold file %s needs %zu bytes, more than the page of %u "
                      "bytes has room for", n->names[i], entry, (unsigned)t->page_bytes);
            return SMP_ERANGE;
        }
        r->more = 1;
        return SMP_OK;
    }
    drop_listing(n); /* the last page */
    return SMP_OK;
}

int node_fsck_scan(node_fsck *n, const NodeTask *t, TaskResult *r, char *err, size_t errlen)
{
    int rc;
    if (t->page_bytes == 0 && !t->segment_only) return scan_whole(n, t, r, err, errlen);
    if (t->page_bytes != 0 && t->page_bytes < NODE_FSCK_PAGE_MIN) {
        wm_errbuf(err, errlen, "scan: a page of %u bytes is below the %u bytes one cold file may "
                  "need", (unsigned)t->page_bytes, NODE_FSCK_PAGE_MIN);
        return SMP_EINVAL;
    }
    r->page_bytes = t->page_bytes;
    r->deep = t->deep && !t->segment_only;
    if ((r->after = strdup(t->after)) == NULL) return SMP_ENOMEM;
    if (t->n_ranges > 0 && (rc = scan_ranges(n, t, r, err, errlen)) != SMP_OK) return rc;
    if (t->segment_only) return SMP_OK;
    return page_files(n, t, r, err, errlen);
}

int node_fsck_scrub(node_fsck *n, const NodeTask *t, char *err, size_t errlen)
{
    for (size_t i = 0; i < t->n_ranges; i++) {
        uint8_t *p = seg_ptr(n->seg, t->ranges[i]->offset, t->ranges[i]->length);
        if (p == NULL) {
            wm_errbuf(err, errlen, "scrub: range %llu+%llu outside the segment",
                      (unsigned long long)t->ranges[i]->offset,
                      (unsigned long long)t->ranges[i]->length);
            return SMP_ERANGE;
        }
        memset(p, 0, (size_t)t->ranges[i]->length);
    }
    return SMP_OK;
}
