/* seg_map.c -- map a node's segment file into a client and copy through it.
 *
 * The file is opened, sized with fstat and mapped MAP_SHARED with the
 * protection asked for; the descriptor is closed right away (the mapping
 * keeps the file). Copies are plain memcpy after an overflow-safe bounds
 * check: the mapping is the zero-copy path, there is nothing else to do. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seg_map.h"
#include "wm_errbuf.h"

/* Map path with the given access; see seg_map_readonly. */
static int map_file(const char *path, int writable, int populate, seg_map *m,
                    char *err, size_t errlen)
{
    int rc;
    struct stat st;
    void *base;
    int fd;

    if (m == NULL || path == NULL) {
        wm_errbuf(err, errlen, "seg_map: missing path or map");
        return SMP_EINVAL;
    }
    memset(m, 0, sizeof(*m));
    fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? SMP_ENOTFOUND : SMP_EIO;
        wm_errbuf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return rc;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > (uint64_t)SIZE_MAX / 2) {
        wm_errbuf(err, errlen, "%s: not a non-empty regular file", path);
        rc = SMP_EINVAL;
        goto close_fd;
    }
    base = mmap(NULL, (size_t)st.st_size, PROT_READ | (writable ? PROT_WRITE : 0),
                MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
    if (base == MAP_FAILED) {
        wm_errbuf(err, errlen, "%s: mmap: %s", path, strerror(errno));
        rc = SMP_EIO;
        goto close_fd;
    }
    m->base = base;
    m->size = (uint64_t)st.st_size;
    m->writable = writable;
    m->dev = (uint64_t)st.st_dev;
    m->ino = (uint64_t)st.st_ino;
    rc = SMP_OK;
close_fd:
    close(fd);
    return rc;
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
    memset(m, 0, sizeof(*m));
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
