/* seg_map.c -- map a node's segment file into a client and copy through it.
 *
 * The file is opened (or received from the node's local socket), sized
 * with fstat and mapped MAP_SHARED with the protection asked for; a path's
 * descriptor is closed right away (the mapping keeps the file), a received
 * one is kept to see the file grow (its path is not this process's to
 * stat). Copies are plain memcpy after an overflow-safe bounds check: the
 * mapping is the zero-copy path, there is nothing else to do. A mapping
 * remembers which of its pages a prefault made present (a bitmap, one bit a
 * page, calloc'd with the mapping: its pages cost memory only where bits are
 * set, 1/32768 of the bytes they stand for, against the 1/512 the page
 * tables themselves take), so a repeated read of the same ranges does not
 * walk them again. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seg_local.h"
#include "seg_map.h"
#include "wm_errbuf.h"

int seg_map_fd(int fd, const char *path, int writable, int populate, seg_map *m, char *err,
               size_t errlen)
{
    struct stat st;
    void *base;
    memset(m, 0, sizeof(*m));
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > (uint64_t)SIZE_MAX / 2) {
        wm_errbuf(err, errlen, "%s: not a non-empty regular file", path);
        return SMP_EINVAL;
    }
    base = mmap(NULL, (size_t)st.st_size, PROT_READ | (writable ? PROT_WRITE : 0),
                MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
    if (base == MAP_FAILED) {
        wm_errbuf(err, errlen, "%s: mmap: %s", path, strerror(errno));
        return SMP_EIO;
    }
    m->base = base;
    m->size = (uint64_t)st.st_size;
    m->writable = writable;
    m->dev = (uint64_t)st.st_dev;
    m->ino = (uint64_t)st.st_ino;
    long page = sysconf(_SC_PAGESIZE);
    m->page = page > 0 ? (uint64_t)page : 4096;
    /* NULL when it cannot be had: every prefault then populates its range */
    m->present = calloc((m->size / m->page + 64) / 64, sizeof *m->present);
    return SMP_OK;
}

/* Map path with the given access; see seg_map_readonly. */
static int map_file(const char *path, int writable, int populate, seg_map *m,
                    char *err, size_t errlen)
{
    int rc;
    if (m == NULL || path == NULL) {
        wm_errbuf(err, errlen, "seg_map: missing path or map");
        return SMP_EINVAL;
    }
    memset(m, 0, sizeof(*m));
    int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? SMP_ENOTFOUND : SMP_EIO;
        wm_errbuf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return rc;
    }
    rc = seg_map_fd(fd, path, writable, populate, m, err, errlen);
    close(fd);
    return rc;
}

static uint64_t ctime_ns(const struct stat *st)
{
    return (uint64_t)st->st_ctim.tv_sec * 1000000000u + (uint64_t)st->st_ctim.tv_nsec;
}

int seg_map_open_at(const char *path, const char *socket, int writable, int populate, seg_map *m,
                    char *err, size_t errlen)
{
    struct stat sst;
    int fd, rc;
    if (socket == NULL || socket[0] == '\0') return map_file(path, writable, populate, m, err, errlen);
    memset(m, 0, sizeof(*m));
    if ((rc = seg_local_fetch(socket, &fd, &sst, err, errlen)) < 0) return rc;
    if ((rc = seg_map_fd(fd, socket, writable, populate, m, err, errlen)) < 0) {
        close(fd);
        return rc;
    }
    m->has_fd = 1;
    m->fd = fd;
    m->sock_dev = (uint64_t)sst.st_dev;
    m->sock_ino = (uint64_t)sst.st_ino;
    m->sock_ctime_ns = ctime_ns(&sst);
    return SMP_OK;
}

const char *seg_map_where(const char *path, const char *socket)
{
    return socket != NULL && socket[0] != '\0' ? socket : path != NULL ? path : "";
}

int seg_map_check(const seg_map *m, const char *where)
{
    struct stat st;
    if (m == NULL || m->base == NULL || where == NULL || stat(where, &st) != 0)
        return SEG_MAP_REPLACED;
    if (m->has_fd) {
        if ((uint64_t)st.st_dev != m->sock_dev || (uint64_t)st.st_ino != m->sock_ino ||
            ctime_ns(&st) != m->sock_ctime_ns || fstat(m->fd, &st) != 0)
            return SEG_MAP_REPLACED; /* the node restarted (or stopped) since */
    } else if (!seg_map_same_file(m, &st)) {
        return SEG_MAP_REPLACED;
    }
    return (uint64_t)st.st_size > m->size ? SEG_MAP_GROWN : SEG_MAP_CURRENT;
}

int seg_map_same_file(const seg_map *m, const struct stat *st)
{
    return m != NULL && m->base != NULL && st != NULL && (uint64_t)st->st_dev == m->dev &&
           (uint64_t)st->st_ino == m->ino;
}

int seg_map_readonly(const char *path, int populate, seg_map *m, char *err, size_t errlen)
{
    return map_file(path, 0, populate, m, err, errlen);
}

int seg_map_writable(const char *path, int populate, seg_map *m, char *err, size_t errlen)
{
    return map_file(path, 1, populate, m, err, errlen);
}

void seg_map_close(seg_map *m)
{
    if (m == NULL || m->base == NULL)
        return;
    munmap(m->base, (size_t)m->size);
    if (m->has_fd) close(m->fd);
    free((void *)m->present);
    memset(m, 0, sizeof(*m));
}

/* Pages [*p0, *p1) of m that [offset, offset + length) touches; 0 when the
 * range is empty or not inside the mapping. */
static int page_span(const seg_map *m, uint64_t offset, uint64_t length, uint64_t *p0,
                     uint64_t *p1)
{
    if (m == NULL || m->base == NULL || length == 0 || offset > m->size ||
        length > m->size - offset)
        return 0;
    *p0 = offset / m->page;
    *p1 = (offset + length + m->page - 1) / m->page;
    return 1;
}

static int page_known(const seg_map *m, uint64_t p)
{
    return (atomic_load_explicit(&m->present[p / 64], memory_order_relaxed) >> (p % 64)) & 1;
}

/* Set (or clear) the bits of pages [p0, p1). */
static void mark_pages(const seg_map *m, uint64_t p0, uint64_t p1, int present)
{
    while (p0 < p1) {
        uint64_t w = p0 / 64, lo = p0 % 64;
        uint64_t n = p1 - p0 < 64 - lo ? p1 - p0 : 64 - lo;
        uint64_t bits = (n == 64 ? ~0ull : ((1ull << n) - 1)) << lo;
        if (present) atomic_fetch_or_explicit(&m->present[w], bits, memory_order_relaxed);
        else atomic_fetch_and_explicit(&m->present[w], ~bits, memory_order_relaxed);
        p0 += n;
    }
}

uint64_t seg_map_prefault(const seg_map *m, uint64_t offset, uint64_t length)
{
    uint64_t p0, p1, done = 0;
    if (!page_span(m, offset, length, &p0, &p1)) return 0;
    for (uint64_t p = p0; p < p1;) {
        if (m->present != NULL && page_known(m, p)) {
            /* skip a whole word of known pages at a time */
            if (p % 64 == 0 && p + 64 <= p1 &&
                atomic_load_explicit(&m->present[p / 64], memory_order_relaxed) == ~0ull)
                p += 64;
            else
                p++;
            continue;
        }
        uint64_t e = p + 1;
        while (e < p1 && (m->present == NULL || !page_known(m, e))) e++;
        uint64_t end = e * m->page < m->size ? e * m->page : m->size;
        if (madvise(m->base + p * m->page, (size_t)(end - p * m->page), MADV_POPULATE_READ) == 0) {
            if (m->present != NULL) mark_pages(m, p, e, 1);
            done += end - p * m->page;
        }
        p = e;
    }
    return done;
}

void seg_map_release(const seg_map *m, uint64_t offset, uint64_t length)
{
    uint64_t p0, p1;
    if (!page_span(m, offset, length, &p0, &p1)) return;
    /* forgotten first; a prefault racing with this may leave a page marked
     * that is not present, which costs that page a fault, never a byte */
    if (m->present != NULL) mark_pages(m, p0, p1, 0);
    uint64_t end = p1 * m->page < m->size ? p1 * m->page : m->size;
    madvise(m->base + p0 * m->page, (size_t)(end - p0 * m->page), MADV_DONTNEED);
}

int seg_map_get(const seg_map *m, uint64_t offset, void *dst, uint64_t length)
{
    if (m == NULL || m->base == NULL || offset > m->size || length > m->size - offset)
        return SMP_ERANGE;
    if (length > 0)
        memcpy(dst, m->base + offset, (size_t)length);
    return SMP_OK;
}

int seg_map_put(seg_map *m, uint64_t offset, const void *src, uint64_t length)
{
    if (m == NULL || m->base == NULL || !m->writable)
        return SMP_ESTATE;
    if (offset > m->size || length > m->size - offset)
        return SMP_ERANGE;
    if (length > 0)
        memcpy(m->base + offset, src, (size_t)length);
    return SMP_OK;
}
