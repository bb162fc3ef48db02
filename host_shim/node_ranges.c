/* node_ranges.c -- the append-only file behind a segment's range table.
 *
 * The table is a sorted array in memory (offset order, binary search) and a
 * log of ADD / DEL records on disk. Open replays the log into the array,
 * stopping at the first record that is short, fails its XXH64 or does not
 * fit the table (overlap, out of the segment) and cutting the file there.
 * Every change appends one record with a single write(2); a failed or short
 * append is cut back so the file always ends on a record boundary. When the
 * log holds far more records than live ranges it is rewritten compactly
 * through a temporary file and a rename. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "node_ranges.h"

#define RANGES_MAGIC "WMRANGE1"
#define RANGES_HDR 16
#define OP_ADD 1
#define OP_DEL 2
#define ADD_FIXED (1 + 8 + 8 + 32 + 2)
#define BODY_MAX (ADD_FIXED + NODE_RANGES_KEY_MAX)
#define REC_MAX (4 + BODY_MAX + 8)

typedef struct entry {
    uint64_t offset;
    uint64_t length;
    uint8_t sha[32];
    char *key;
} entry;

struct node_ranges {
    char *path;
    int fd;
    uint64_t seg_size;
    uint64_t file_len;
    uint64_t records;    /* records in the file */
    entry *v;
    size_t n;
    size_t cap;
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

/* Index of the first entry with offset >= off. */
static size_t lower_bound(const node_ranges *r, uint64_t off)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->v[mid].offset < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* SMP_OK when [off, off + len) is inside the segment and overlaps no entry;
 * *at gets the insertion index. A 0-byte range occupies its offset. */
static int check_free(const node_ranges *r, uint64_t off, uint64_t len, size_t *at)
{
    size_t i;
    uint64_t end;
    if (off > r->seg_size || len > r->seg_size - off || (len == 0 && off == r->seg_size))
        return SMP_ERANGE;
    end = off + (len > 0 ? len : 1);
    i = lower_bound(r, off);
    if (i < r->n && r->v[i].offset < end)
        return SMP_EEXIST;
    if (i > 0) {
        const entry *p = &r->v[i - 1];
        if (p->offset + (p->length > 0 ? p->length : 1) > off)
            return SMP_EEXIST;
    }
    *at = i;
    return SMP_OK;
}

/* Insert an entry at index at (key copied). SMP_OK or SMP_ENOMEM. */
static int insert_at(node_ranges *r, size_t at, const char *key, size_t klen, uint64_t off,
                     uint64_t len, const uint8_t sha[32])
{
    entry e;
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 64;
        entry *nv = realloc(r->v, nc * sizeof(*nv));
        if (nv == NULL)
            return SMP_ENOMEM;
        r->v = nv;
        r->cap = nc;
    }
    e.key = malloc(klen + 1);
    if (e.key == NULL)
        return SMP_ENOMEM;
    memcpy(e.key, key, klen);
    e.key[klen] = '\0';
    e.offset = off;
    e.length = len;
    memcpy(e.sha, sha, 32);
    memmove(&r->v[at + 1], &r->v[at], (r->n - at) * sizeof(entry));
    r->v[at] = e;
    r->n++;
    return SMP_OK;
}

static void remove_at(node_ranges *r, size_t at)
{
    free(r->v[at].key);
    memmove(&r->v[at], &r->v[at + 1], (r->n - at - 1) * sizeof(entry));
    r->n--;
}

/* Encode a record into rec (REC_MAX bytes); returns its size. */
static size_t encode_add(uint8_t *rec, const char *key, size_t klen, uint64_t off, uint64_t len,
                         const uint8_t sha[32])
{
    uint8_t *b = rec + 4;
    size_t blen = ADD_FIXED + klen;
    b[0] = OP_ADD;
    put_u64(b + 1, off);
    put_u64(b + 9, len);
    memcpy(b + 17, sha, 32);
    put_u16(b + 49, (uint16_t)klen);
    memcpy(b + ADD_FIXED, key, klen);
    put_u32(rec, (uint32_t)blen);
    put_u64(b + blen, XXH64(b, blen, 0));
    return 4 + blen + 8;
}

static size_t encode_del(uint8_t *rec, uint64_t off)
{
    uint8_t *b = rec + 4;
    b[0] = OP_DEL;
    put_u64(b + 1, off);
    put_u32(rec, 9);
    put_u64(b + 9, XXH64(b, 9, 0));
    return 4 + 9 + 8;
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return SMP_EIO;
        }
        p += n;
        len -= (size_t)n;
    }
    return SMP_OK;
}

/* Append one record; on failure cut the file back to where it was. */
static int append(node_ranges *r, const uint8_t *rec, size_t len)
{
    if (write_all(r->fd, rec, len) < 0) {
        if (ftruncate(r->fd, (off_t)r->file_len) == 0)
            (void)lseek(r->fd, (off_t)r->file_len, SEEK_SET);
        return SMP_EIO;
    }
    r->file_len += len;
    r->records++;
    return SMP_OK;
}

/* Apply one checked record body. SMP_OK, or SMP_EPROTO when it does not fit. */
static int apply_body(node_ranges *r, const uint8_t *b, size_t blen)
{
    size_t at;
    if (b[0] == OP_ADD && blen >= ADD_FIXED) {
        uint64_t off = get_u64(b + 1), len = get_u64(b + 9);
        size_t klen = get_u16(b + 49);
        if (klen == 0 || klen > NODE_RANGES_KEY_MAX || blen != ADD_FIXED + klen ||
            memchr(b + ADD_FIXED, '\0', klen) != NULL || check_free(r, off, len, &at) < 0)
            return SMP_EPROTO;
        return insert_at(r, at, (const char *)b + ADD_FIXED, klen, off, len, b + 17);
    }
    if (b[0] == OP_DEL && blen == 9) {
        uint64_t off = get_u64(b + 1);
        at = lower_bound(r, off);
        if (at < r->n && r->v[at].offset == off)
            remove_at(r, at);
        return SMP_OK;
    }
    return SMP_EPROTO;
}

/* Rewrite the file with one ADD per live range (temporary file, rename).
 * On failure the old file stays in use. */
static int compact(node_ranges *r)
{
    int rc = SMP_OK, fd;
    uint8_t hdr[RANGES_HDR], rec[REC_MAX];
    uint64_t len = RANGES_HDR;
    size_t plen = strlen(r->path) + 5;
    char *tmp = malloc(plen);
    if (tmp == NULL)
        return SMP_ENOMEM;
    snprintf(tmp, plen, "%s.tmp", r->path);
    fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = SMP_EIO;
        goto free_tmp;
    }
    memcpy(hdr, RANGES_MAGIC, 8);
    put_u64(hdr + 8, r->seg_size);
    rc = write_all(fd, hdr, sizeof(hdr));
    for (size_t i = 0; i < r->n && rc == SMP_OK; i++) {
        size_t n = encode_add(rec, r->v[i].key, strlen(r->v[i].key), r->v[i].offset,
                              r->v[i].length, r->v[i].sha);
        rc = write_all(fd, rec, n);
        len += n;
    }
    if (rc == SMP_OK && rename(tmp, r->path) < 0)
        rc = SMP_EIO;
    if (rc < 0) {
        close(fd);
        unlink(tmp);
        goto free_tmp;
    }
    close(r->fd);
    r->fd = fd;
    (void)lseek(fd, (off_t)len, SEEK_SET);
    r->file_len = len;
    r->records = r->n;
free_tmp:
    free(tmp);
    return rc;
}

/* Read the whole file, replay it; sets info. SMP_OK, SMP_EIO, SMP_ENOMEM. */
static int load(node_ranges *r, node_ranges_open_info *info)
{
    int rc = SMP_OK;
    struct stat st;
    uint8_t *buf = NULL, hdr[RANGES_HDR];
    uint64_t pos = RANGES_HDR;

    if (fstat(r->fd, &st) < 0)
        return SMP_EIO;
    if (st.st_size > 0) {
        buf = malloc((size_t)st.st_size);
        if (buf == NULL)
            return SMP_ENOMEM;
        if (pread(r->fd, buf, (size_t)st.st_size, 0) != st.st_size) {
            rc = SMP_EIO;
            goto free_buf;
        }
    }
    if (st.st_size < RANGES_HDR || memcmp(buf, RANGES_MAGIC, 8) != 0 ||
        get_u64(buf + 8) != r->seg_size) {
        /* new, or the table of another segment: start empty */
        info->discarded = st.st_size > 0;
        memcpy(hdr, RANGES_MAGIC, 8);
        put_u64(hdr + 8, r->seg_size);
        if (ftruncate(r->fd, 0) < 0 || pwrite(r->fd, hdr, sizeof(hdr), 0) != sizeof(hdr)) {
            rc = SMP_EIO;
            goto free_buf;
        }
        r->file_len = RANGES_HDR;
        goto free_buf;
    }
    while (pos < (uint64_t)st.st_size) {
        uint64_t left = (uint64_t)st.st_size - pos;
        uint32_t blen;
        const uint8_t *b;
        if (left < 4 || (blen = get_u32(buf + pos)) == 0 || blen > BODY_MAX ||
            left < 4 + (uint64_t)blen + 8)
            break;
        b = buf + pos + 4;
        if (get_u64(b + blen) != XXH64(b, blen, 0))
            break;
        rc = apply_body(r, b, blen);
        if (rc == SMP_ENOMEM)
            goto free_buf;
        if (rc < 0) {
            rc = SMP_OK;
            break;
        }
        pos += 4 + blen + 8;
        r->records++;
    }
    if (pos < (uint64_t)st.st_size) {
        info->cut_tail = 1;
        if (ftruncate(r->fd, (off_t)pos) < 0) {
            rc = SMP_EIO;
            goto free_buf;
        }
    }
    r->file_len = pos;
free_buf:
    free(buf);
    return rc;
}

int node_ranges_open(const seg_segment *seg,
                     node_ranges **out,
                     node_ranges_open_info *info,
                     char *err,
                     size_t errlen)
{
    int rc;
    node_ranges *r;
    node_ranges_open_info local;
    const char *sp;
    size_t sl, plen;

    if (seg == NULL || out == NULL)
        return SMP_EINVAL;
    if (info == NULL)
        info = &local;
    memset(info, 0, sizeof(*info));
    *out = NULL;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return SMP_ENOMEM;
    r->fd = -1;
    r->seg_size = seg_size(seg);
    sp = seg_path(seg);
    sl = strlen(sp);
    if (sl >= strlen(SEG_FILE_SUFFIX) && strcmp(sp + sl - strlen(SEG_FILE_SUFFIX), SEG_FILE_SUFFIX) == 0)
        sl -= strlen(SEG_FILE_SUFFIX);
    plen = sl + strlen(NODE_RANGES_SUFFIX) + 1;
    r->path = malloc(plen);
    if (r->path == NULL) {
        rc = SMP_ENOMEM;
        goto free_r;
    }
    snprintf(r->path, plen, "%.*s%s", (int)sl, sp, NODE_RANGES_SUFFIX);
    r->fd = open(r->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (r->fd < 0) {
        set_err(err, errlen, "%s: cannot open: %s", r->path, strerror(errno));
        rc = SMP_EIO;
        goto free_r;
    }
    if ((rc = load(r, info)) < 0) {
        set_err(err, errlen, "%s: cannot load: %s", r->path, smp_strerror(rc));
        goto free_r;
    }
    if (r->records > 2 * (uint64_t)r->n + 64 && compact(r) < 0) {
        /* still usable: the log is only longer than it needs to be */
    }
    (void)lseek(r->fd, (off_t)r->file_len, SEEK_SET);
    info->loaded = r->n;
    *out = r;
    return SMP_OK;
free_r:
    node_ranges_close(r);
    return rc;
}

void node_ranges_close(node_ranges *r)
{
    if (r == NULL)
        return;
    if (r->fd >= 0)
        close(r->fd);
    for (size_t i = 0; i < r->n; i++)
        free(r->v[i].key);
    free(r->v);
    free(r->path);
    free(r);
}

void node_ranges_destroy(node_ranges *r)
{
    if (r == NULL)
        return;
    unlink(r->path);
    node_ranges_close(r);
}

int node_ranges_add(node_ranges *r,
                    const char *key,
                    uint64_t offset,
                    uint64_t length,
                    const uint8_t sha256[32])
{
    int rc;
    size_t at, klen;
    uint8_t rec[REC_MAX];
    if (r == NULL || key == NULL || sha256 == NULL)
        return SMP_EINVAL;
    klen = strnlen(key, NODE_RANGES_KEY_MAX + 1);
    if (klen == 0 || klen > NODE_RANGES_KEY_MAX)
        return SMP_EINVAL;
    if ((rc = check_free(r, offset, length, &at)) < 0)
        return rc;
    if (r->n == r->cap) { /* grow first, so that a logged range is always in memory */
        size_t nc = r->cap ? r->cap * 2 : 64;
        entry *nv = realloc(r->v, nc * sizeof(*nv));
        if (nv == NULL)
            return SMP_ENOMEM;
        r->v = nv;
        r->cap = nc;
    }
    if ((rc = append(r, rec, encode_add(rec, key, klen, offset, length, sha256))) < 0)
        return rc;
    if ((rc = insert_at(r, at, key, klen, offset, length, sha256)) < 0) {
        /* the key copy failed: log the removal so file and memory agree */
        uint8_t del[REC_MAX];
        (void)append(r, del, encode_del(del, offset));
        return rc;
    }
    if (r->records > 2 * (uint64_t)r->n + 1024)
        (void)compact(r);
    return SMP_OK;
}

int node_ranges_remove(node_ranges *r, uint64_t offset)
{
    int rc;
    uint8_t rec[REC_MAX];
    size_t at = lower_bound(r, offset);
    if (at >= r->n || r->v[at].offset != offset)
        return SMP_ENOTFOUND;
    if ((rc = append(r, rec, encode_del(rec, offset))) < 0)
        return rc;
    remove_at(r, at);
    if (r->records > 2 * (uint64_t)r->n + 1024)
        (void)compact(r);
    return SMP_OK;
}

static void to_range(const entry *e, node_range *out)
{
    out->offset = e->offset;
    out->length = e->length;
    memcpy(out->sha256, e->sha, 32);
    out->key = e->key;
}

int node_ranges_get(const node_ranges *r, uint64_t offset, node_range *out)
{
    size_t at = lower_bound(r, offset);
    if (at >= r->n || r->v[at].offset != offset)
        return SMP_ENOTFOUND;
    if (out != NULL)
        to_range(&r->v[at], out);
    return SMP_OK;
}

size_t node_ranges_count(const node_ranges *r)
{
    return r->n;
}

int node_ranges_visit(const node_ranges *r,
                      int (*fn)(void *arg, const node_range *range),
                      void *arg)
{
    node_range nr;
    for (size_t i = 0; i < r->n; i++) {
        int rc;
        to_range(&r->v[i], &nr);
        if ((rc = fn(arg, &nr)) != 0)
            return rc;
    }
    return SMP_OK;
}

int node_ranges_verify(const node_ranges *r,
                       const seg_segment *seg,
                       int (*fn)(void *arg, const node_range *range, int matches),
                       void *arg)
{
    node_range nr;
    uint8_t md[32];
    for (size_t i = 0; i < r->n; i++) {
        int rc = seg_sha256(seg, r->v[i].offset, r->v[i].length, md);
        if (rc == SMP_ENOMEM)
            return rc;
        to_range(&r->v[i], &nr);
        if ((rc = fn(arg, &nr, rc == SMP_OK && memcmp(md, r->v[i].sha, 32) == 0)) != 0)
            return rc;
    }
    return SMP_OK;
}
