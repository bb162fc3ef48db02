/* node_segment.c -- a node's memory segment as a mapped, locked file.
 *
 * Opening takes an exclusive flock on the file before anything else, so a
 * second node (or a second open in the same node) is refused with SMP_EBUSY
 * instead of sharing the bytes (after a short wait: a holder that is dying,
 * such as a killed master's snapshot writer, lets go within it). An existing file smaller than the
 * configured size is grown in place (the new tail reserved like a new file's
 * bytes): every byte it held stays where it was, so every replica the master
 * knows about stays valid, and a mapping a co-located client holds of the
 * old size stays valid for the old range (growing a file never invalidates
 * a mapping; clients map again when a range lies past theirs). A larger
 * file is not cut at open: whether its tail is free is the master's to say,
 * so it is mapped whole and seg_shrink cuts it once the master agreed
 * (seg_requested_size says what was asked). The served size is atomic
 * because seg_shrink may run while the data thread checks ranges. The
 * mapping is MAP_SHARED, so what a co-located client writes through its own
 * mapping of the same file is what the node serves, and the reverse.
 *
 * With seg_options.prefault a thread touches every page of the mapping once,
 * 2 MiB at a time, at the lowest priority (seg_prefaulted); seg_shrink takes
 * its lock, so it never touches a page past a cut, and seg_close stops and
 * joins it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <stdatomic.h>

#include <openssl/evp.h>

#include "node_segment.h"
#include "wm_errbuf.h"

struct seg_segment {
    char id[SEG_ID_MAX + 1];
    char *path;
    int fd;
    uint8_t *base;
    atomic_uint_least64_t size; /* the bytes served (bounds of every range) */
    uint64_t map_len;           /* the bytes mapped */
    uint64_t requested;         /* the configured size */
    uint64_t grown_from;        /* the file's size before a growth at open; 0: none */
    int reopened;
    pthread_mutex_t cut_lock;   /* a pre-fault step or a seg_shrink, not both */
    pthread_t prefault;
    int prefaulting;            /* the thread was started: seg_close joins it */
    atomic_int prefault_stop;
    atomic_uint_least64_t prefaulted;
};

#define SEG_PREFAULT_STEP (2u << 20) /* bytes touched under one hold of cut_lock */

/* The pre-fault thread: every page of the served size, in order, one step
 * at a time under cut_lock (see seg_prefaulted). */
static void *prefault_main(void *arg)
{
    seg_segment *s = arg;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* this thread only: the data server and the runtime keep their share */
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(), 19);
    for (uint64_t off = 0;;) {
        pthread_mutex_lock(&s->cut_lock);
        uint64_t size = seg_size(s);
        if (atomic_load(&s->prefault_stop) || off >= size) {
            pthread_mutex_unlock(&s->cut_lock);
            break;
        }
        uint64_t len = size - off < SEG_PREFAULT_STEP ? size - off : SEG_PREFAULT_STEP;
#ifdef MADV_POPULATE_WRITE
        (void)madvise(s->base + off, (size_t)len, MADV_POPULATE_WRITE); /* one fault per step */
#endif
        for (uint64_t p = off; p < off + len; p += page)
            atomic_fetch_add_explicit((_Atomic uint8_t *)(s->base + p), 0, memory_order_relaxed);
        off += len;
        atomic_store(&s->prefaulted, off);
        pthread_mutex_unlock(&s->cut_lock);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!atomic_load(&s->prefault_stop))
        fprintf(stderr, "segment %s: %" PRIu64 " bytes pre-faulted in %.1f s\n", s->path,
                atomic_load(&s->prefaulted),
                (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    return NULL;
}

int seg_validate_id(const char *id)
{
    size_t n;
    if (id == NULL || id[0] == '\0' || id[0] == '.')
        return SMP_EINVAL;
    for (n = 0; id[n] != '\0'; n++) {
        char c = id[n];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        if (!ok || n >= SEG_ID_MAX)
            return SMP_EINVAL;
    }
    return SMP_OK;
}

/* Whether the mount point mnt holds the absolute path (a prefix of it at a
 * '/' boundary): mnt's length then, 0 otherwise. */
static size_t mount_holds(const char *mnt, const char *path)
{
    size_t n = strlen(mnt);
    if (strncmp(path, mnt, n) != 0) return 0;
    if (path[n] == '/' || path[n] == '\0') return n;
    return n == 1 && mnt[0] == '/' ? 1 : 0; /* the root holds every path */
}

int seg_mount_pages(const char *mounts, const char *dir, char *out, size_t cap)
{
    char *text = NULL, *line, *save = NULL, abs[PATH_MAX];
    size_t best = 0;
    int rc = SMP_ENOTFOUND;
    snprintf(out, cap, "?");
    if (dir == NULL || realpath(dir, abs) == NULL) return SMP_ENOTFOUND;
    if (mounts == NULL) {
        FILE *f = fopen("/proc/self/mounts", "r");
        size_t len = 0;
        if (f == NULL) return SMP_ENOTFOUND;
        ssize_t got = getdelim(&text, &len, '\0', f); /* the whole file */
        fclose(f);
        if (got <= 0) goto done;
    } else if ((text = strdup(mounts)) == NULL) {
        return SMP_ENOMEM;
    }
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char mnt[PATH_MAX], type[64], opts[1024];
        if (sscanf(line, "%*s %4095s %63s %1023s", mnt, type, opts) != 3) continue;
        size_t n = mount_holds(mnt, abs);
        if (n == 0 || n < best) continue;
        best = n;
        const char *h = strstr(opts, "huge=");
        if (strcmp(type, "tmpfs") != 0) {
            snprintf(out, cap, "%s", type);
            rc = 0;
        } else if (h == NULL || strncmp(h, "huge=never", 10) == 0) {
            snprintf(out, cap, "tmpfs, 4 KiB pages");
            rc = 1;
        } else {
            snprintf(out, cap, "tmpfs, %.*s", (int)strcspn(h, ","), h);
            rc = 0;
        }
    }
done:
    free(text);
    return rc;
}

int seg_path_for(const char *dir, const char *id, char *buf, size_t cap)
{
    int n;
    if (seg_validate_id(id) < 0 || buf == NULL)
        return SMP_EINVAL;
    if (dir == NULL || dir[0] == '\0')
        dir = SEG_DEFAULT_DIR;
    n = snprintf(buf, cap, "%s/%s%s", dir, id, SEG_FILE_SUFFIX);
    if (n < 0 || (size_t)n >= cap)
        return SMP_ERANGE;
    return SMP_OK;
}

/* Size a file from `from` bytes (0: freshly created or empty) to size
 * bytes, reserving the new bytes when asked; bytes below `from` are not
 * touched. Returns SMP_OK, SMP_ENOSPC or SMP_EIO with err set. */
static int size_file(int fd, const char *path, uint64_t from, uint64_t size, int prealloc,
                     char *err, size_t errlen)
{
    int e;
    if (prealloc) {
        e = posix_fallocate(fd, (off_t)from, (off_t)(size - from));
        if (e == 0)
            return SMP_OK;
        if (e == ENOSPC || e == EFBIG) {
            wm_errbuf(err, errlen, "%s: cannot reserve %" PRIu64 " bytes (to size it from %"
                    PRIu64 " to %" PRIu64 "): %s", path, size - from, from, size, strerror(e));
            return SMP_ENOSPC;
        }
        if (e != EOPNOTSUPP && e != EINVAL) {
            wm_errbuf(err, errlen, "%s: fallocate: %s", path, strerror(e));
            return SMP_EIO;
        }
        /* the file system cannot reserve: fall back to a sparse size */
    }
    if (ftruncate(fd, (off_t)size) < 0) {
        e = errno;
        wm_errbuf(err, errlen, "%s: cannot size to %" PRIu64 " bytes: %s", path, size, strerror(e));
        return e == ENOSPC || e == EFBIG ? SMP_ENOSPC : SMP_EIO;
    }
    return SMP_OK;
}

/* How long seg_open waits for the segment's lock before it says another
 * node holds it. A master killed at the moment it forked its snapshot
 * writer leaves that child holding the inherited lock until the child
 * closes its descriptors or dies with its parent (PR_SET_PDEATHSIG), a
 * matter of milliseconds; a master restarted at once must not fail on it. */
#define SEG_LOCK_WAIT_MS 2000

/* flock(fd, LOCK_EX | LOCK_NB), tried every 10 ms for up to
 * SEG_LOCK_WAIT_MS while another holder has it. 0, or -1 with errno
 * (EWOULDBLOCK: still held at the end). */
static int seg_lock(int fd)
{
    for (int waited = 0;; waited += 10) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
        if (errno != EWOULDBLOCK || waited >= SEG_LOCK_WAIT_MS) return -1;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int seg_open(const seg_options *opt, seg_segment **out, char *err, size_t errlen)
{
    int rc;
    int created = 0;
    struct stat st;
    seg_segment *s;
    const char *dir;
    char path[4096];

    if (opt == NULL || out == NULL) {
        wm_errbuf(err, errlen, "segment: missing options");
        return SMP_EINVAL;
    }
    *out = NULL;
    dir = opt->dir != NULL && opt->dir[0] != '\0' ? opt->dir : SEG_DEFAULT_DIR;
    if (seg_validate_id(opt->id) < 0) {
        wm_errbuf(err, errlen, "segment: invalid id \"%.64s\" (1..%d of [A-Za-z0-9._-], not '.' first)",
                opt->id != NULL ? opt->id : "", SEG_ID_MAX);
        return SMP_EINVAL;
    }
    if (opt->size == 0 || opt->size > (uint64_t)SIZE_MAX / 2 || opt->size > (uint64_t)INT64_MAX) {
        wm_errbuf(err, errlen, "segment %s: size %" PRIu64 " is not usable", opt->id, opt->size);
        return SMP_EINVAL;
    }
    if ((rc = seg_path_for(dir, opt->id, path, sizeof(path))) < 0) {
        wm_errbuf(err, errlen, "segment %s: directory path too long", opt->id);
        return rc;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        wm_errbuf(err, errlen, "%s: cannot create the directory: %s", dir, strerror(errno));
        return SMP_EIO;
    }

    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return SMP_ENOMEM;
    s->fd = -1;
    pthread_mutex_init(&s->cut_lock, NULL);
    snprintf(s->id, sizeof(s->id), "%s", opt->id);
    s->path = strdup(path);
    if (s->path == NULL) {
        rc = SMP_ENOMEM;
        goto free_seg;
    }

    s->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (s->fd >= 0)
        created = 1;
    else if (errno == EEXIST)
        s->fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (s->fd < 0) {
        wm_errbuf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        rc = SMP_EIO;
        goto free_seg;
    }
    if (seg_lock(s->fd) < 0) {
        if (errno == EWOULDBLOCK) {
            wm_errbuf(err, errlen, "%s: the segment is held open by another node (waited %d ms)",
                      path, SEG_LOCK_WAIT_MS);
            rc = SMP_EBUSY;
        } else {
            wm_errbuf(err, errlen, "%s: flock: %s", path, strerror(errno));
            rc = SMP_EIO;
        }
        goto close_fd;
    }
    if (fstat(s->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        wm_errbuf(err, errlen, "%s: not a regular file", path);
        rc = SMP_EIO;
        goto close_fd;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        /* in a shared directory such as /dev/shm another user could have
           planted the file to read or feed our replicas */
        wm_errbuf(err, errlen, "%s: owned by uid %u with mode %03o; a segment file must be "
                "this user's and private (0600)", path, (unsigned)st.st_uid,
                (unsigned)(st.st_mode & 0777));
        rc = SMP_EINVAL;
        goto close_fd;
    }
    if (st.st_size == 0)
        created = 1;
    if (created) {
        if ((rc = size_file(s->fd, path, 0, opt->size, opt->preallocate, err, errlen)) < 0)
            goto unlink_new;
    } else if ((uint64_t)st.st_size < opt->size) {
        /* grown in place: the old bytes stay where the master placed them */
        if ((rc = size_file(s->fd, path, (uint64_t)st.st_size, opt->size, opt->preallocate, err,
                            errlen)) < 0) {
            if (ftruncate(s->fd, st.st_size) < 0) { /* as it was; nothing else changed */ }
            goto close_fd;
        }
        s->grown_from = (uint64_t)st.st_size;
    } else if ((uint64_t)st.st_size > opt->size) {
        if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX / 2) {
            wm_errbuf(err, errlen, "%s: %" PRIu64 " bytes cannot be mapped", path,
                      (uint64_t)st.st_size);
            rc = SMP_EINVAL;
            goto close_fd;
        }
        s->map_len = (uint64_t)st.st_size; /* cut by seg_shrink once the master agreed */
    }
    if (s->map_len == 0) s->map_len = opt->size;
    atomic_store(&s->size, s->map_len);
    s->requested = opt->size;
    s->base = mmap(NULL, (size_t)s->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (s->base == MAP_FAILED) {
        s->base = NULL;
        wm_errbuf(err, errlen, "%s: mmap of %" PRIu64 " bytes: %s", path, s->map_len,
                  strerror(errno));
        rc = SMP_EIO;
        goto unlink_new;
    }
    s->reopened = !created;
    /* without the thread the segment works the same, only slower to write */
    if (opt->prefault && pthread_create(&s->prefault, NULL, prefault_main, s) == 0)
        s->prefaulting = 1;
    *out = s;
    return SMP_OK;

unlink_new:
    if (created)
        unlink(path);
close_fd:
    close(s->fd);
free_seg:
    pthread_mutex_destroy(&s->cut_lock);
    free(s->path);
    free(s);
    return rc;
}

void seg_close(seg_segment *s)
{
    if (s == NULL)
        return;
    if (s->prefaulting) {
        atomic_store(&s->prefault_stop, 1);
        pthread_join(s->prefault, NULL);
    }
    pthread_mutex_destroy(&s->cut_lock);
    if (s->base != NULL)
        munmap(s->base, (size_t)s->map_len);
    if (s->fd >= 0)
        close(s->fd);
    free(s->path);
    free(s);
}

int seg_destroy(seg_segment *s)
{
    int rc = SMP_OK;
    if (s == NULL)
        return SMP_OK;
    /* unlink while the lock is still held, so no other node reopens it meanwhile */
    if (unlink(s->path) < 0 && errno != ENOENT)
        rc = SMP_EIO;
    seg_close(s);
    return rc;
}

const char *seg_id(const seg_segment *s) { return s->id; }
const char *seg_path(const seg_segment *s) { return s->path; }

int seg_share_fd(const seg_segment *s)
{
    struct stat mine, got;
    int fd = open(s->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return SMP_EIO;
    if (fstat(s->fd, &mine) < 0 || fstat(fd, &got) < 0 || mine.st_dev != got.st_dev ||
        mine.st_ino != got.st_ino) {
        close(fd);
        return SMP_ENOTFOUND;
    }
    return fd;
}
uint64_t seg_size(const seg_segment *s) { return atomic_load(&((seg_segment *)s)->size); }
uint64_t seg_requested_size(const seg_segment *s) { return s->requested; }
uint64_t seg_grown_from(const seg_segment *s) { return s->grown_from; }
int seg_reopened(const seg_segment *s) { return s->reopened; }
uint64_t seg_prefaulted(const seg_segment *s)
{
    return atomic_load(&((seg_segment *)s)->prefaulted);
}

int seg_shrink(seg_segment *s, uint64_t size, char *err, size_t errlen)
{
    uint64_t cur = seg_size(s);
    if (size == 0 || size > cur) {
        wm_errbuf(err, errlen, "%s: cannot shrink from %" PRIu64 " to %" PRIu64 " bytes", s->path,
                  cur, size);
        return SMP_EINVAL;
    }
    if (size == cur) return SMP_OK;
    int rc = SMP_OK;
    pthread_mutex_lock(&s->cut_lock); /* no pre-fault step past the cut */
    /* bounds first: no range past the new end is served from now on */
    atomic_store(&s->size, size);
    if (atomic_load(&s->prefaulted) > size) atomic_store(&s->prefaulted, size);
    if (ftruncate(s->fd, (off_t)size) < 0) {
        wm_errbuf(err, errlen, "%s: cannot cut to %" PRIu64 " bytes: %s", s->path, size,
                  strerror(errno));
        rc = SMP_EIO;
    }
    pthread_mutex_unlock(&s->cut_lock);
    return rc;
}

int seg_next_data(const seg_segment *s, uint64_t from, uint64_t *start, uint64_t *end)
{
    uint64_t size = seg_size(s);
    if (from >= size) return SMP_ENOTFOUND;
    off_t d = lseek(s->fd, (off_t)from, SEEK_DATA);
    if (d < 0) {
        if (errno == ENXIO) return SMP_ENOTFOUND;
        *start = from; /* cannot tell: all of it may hold data */
        *end = size;
        return SMP_OK;
    }
    if ((uint64_t)d >= size) return SMP_ENOTFOUND;
    off_t h = lseek(s->fd, d, SEEK_HOLE);
    *start = (uint64_t)d;
    *end = h < 0 || (uint64_t)h > size ? size : (uint64_t)h;
    return SMP_OK;
}

int seg_pread(const seg_segment *s, uint64_t offset, void *dst, uint64_t length)
{
    uint64_t done = 0;
    if (seg_check_range(s, offset, length) < 0) return SMP_ERANGE;
    while (done < length) {
        ssize_t n = pread(s->fd, (uint8_t *)dst + done, (size_t)(length - done),
                          (off_t)(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return SMP_EIO;
        done += (uint64_t)n;
    }
    return SMP_OK;
}

int seg_check_range(const seg_segment *s, uint64_t offset, uint64_t length)
{
    uint64_t size;
    if (s == NULL) return SMP_ERANGE;
    size = seg_size(s);
    if (offset > size || length > size - offset)
        return SMP_ERANGE;
    return SMP_OK;
}

uint8_t *seg_ptr(seg_segment *s, uint64_t offset, uint64_t length)
{
    if (seg_check_range(s, offset, length) < 0)
        return NULL;
    return s->base + offset;
}

int seg_read(const seg_segment *s, uint64_t offset, void *dst, uint64_t length)
{
    if (seg_check_range(s, offset, length) < 0)
        return SMP_ERANGE;
    if (length > 0)
        memcpy(dst, s->base + offset, (size_t)length);
    return SMP_OK;
}

int seg_write(seg_segment *s, uint64_t offset, const void *src, uint64_t length)
{
    if (seg_check_range(s, offset, length) < 0)
        return SMP_ERANGE;
    if (length > 0)
        memcpy(s->base + offset, src, (size_t)length);
    return SMP_OK;
}

int seg_sha256(const seg_segment *s, uint64_t offset, uint64_t length, uint8_t out[32])
{
    if (seg_check_range(s, offset, length) < 0)
        return SMP_ERANGE;
    if (!EVP_Digest(s->base + offset, (size_t)length, out, NULL, EVP_sha256(), NULL))
        return SMP_ENOMEM;
    return SMP_OK;
}
