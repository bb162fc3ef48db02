/* oplog_file.c -- the file backend of the OpLog.
 *
 * Records are appended to segment files in opt->dir (named by the sequence of
 * their first record, 000000000000000001.log) and made durable in groups
 * through the OpLog pipeline (oplog_pipe.c): the writer thread takes whatever
 * was queued while the previous fdatasync ran (up to max_batch_records),
 * writes it with one writev, syncs once, and the pipeline hands the batch
 * back to the loop thread, where the durable callbacks run in sequence
 * order. The loop hands its appends over once per turn of the event loop, so
 * a burst read in one turn shares one sync (at 64 clients, 25-27 records per
 * sync instead of 17-22, for the same rate). A failed write or sync makes
 * the log read-only: every queued record fails with SMP_EDURABILITY and
 * every later append is refused (fail closed, like PostgreSQL after a failed
 * fsync).
 *
 * With opt.preallocate a segment is given its full size when it is created
 * (posix_fallocate) and records are written into it at the end of the data,
 * so an fdatasync never has to change the file's size or allocate blocks.
 * fallocate leaves the blocks "unwritten", though, and the first sync of
 * data in each block must also write the extent change: an inode write per
 * 4 KiB of log. PostgreSQL zero-fills whole WAL segments to avoid this; here
 * the writer writes zeros ahead of the data, ZERO_AHEAD bytes at a time, so
 * one sync per ZERO_AHEAD bytes of log converts a run of blocks and the
 * others write data and flush only (2.6 KB batches, as at 64 clients: about
 * 10,500 syncs/s instead of 7,500-8,000 on the development VM), while
 * creating a segment still costs nothing. The space after the last record
 * reads as zeros either way.
 *
 * Recovery at open reads the segments in order and checks every record's
 * checksum and that sequences are contiguous. Bytes that are all zero from a
 * record boundary to the end of a segment are space never written: the
 * segment's records end there (the next segment must start with the next
 * sequence, so a lost record still shows as a gap). A bad record at the end
 * of the last segment, with nothing valid after it, is a torn tail: it is
 * cut. Anything else that does not verify refuses the open and touches
 * nothing.
 * Nothing here knows what a record means: replay is the caller's. Recovery
 * and replay map segments read-only; nothing else may shrink them meanwhile.
 *
 * Record layout, little-endian:
 *   u32 magic "WOL1" | u64 seq | u16 type | u16 encver | u32 len |
 *   payload[len] | u64 XXH64(header and payload, seed 0) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <xxhash.h>

#include "oplog.h"
#include "oplog_le.h"
#include "oplog_pipe.h"
#include "wm_errbuf.h"

#define REC_MAGIC 0x314C4F57u /* bytes 'W' 'O' 'L' '1' */
#define REC_HDR OPLOG_REC_HDR /* the layout of oplog_pipe.h */
#define REC_SUM OPLOG_REC_SUM
#define REC_FRAME OPLOG_REC_FRAME
#define SEG_DIGITS 18
#define SEG_SUFFIX ".log"

#define DEFAULT_SEGMENT_BYTES (UINT64_C(64) << 20)
#define ZERO_AHEAD (256u << 10) /* zeros written past the data at a time */
#define DEFAULT_MAX_BATCH 1024u
#define DEFAULT_MAX_RECORD (16u << 20)

typedef struct file_log {
    struct oplog base;
    oplog_pipe pipe;       /* entries' rec: the record as written, its
                              checksum filled by the writer */
    uv_loop_t *loop;
    char *dir;
    oplog_file_options opt; /* defaults applied; opt.dir points at dir */

    /* Loop thread only. */
    uint64_t last_seq;     /* last assigned */
    int appended;          /* replay is no longer allowed */

    /* Shared between the loop and the writer, under pipe.mu. */
    uint64_t *segs;        /* first sequence of each segment, ascending */
    size_t nsegs;
    size_t segs_cap;

    /* Writer thread only (after open). */
    int fd;                /* the last segment, open for writing */
    uint64_t cur_size;     /* its size; everything in it is durable */
    uint64_t zeroed_to;    /* data or zeros are written up to here, or no
                              more zeros are tried in this segment */
    uint32_t sync_attempts;
    struct iovec *iov;     /* max_batch_records entries */
} file_log;

typedef enum rec_status {
    REC_OK = 0,
    REC_SHORT_HEADER,
    REC_BAD_MAGIC,
    REC_SHORT_RECORD,
    REC_BAD_CHECKSUM
} rec_status;

static const char *rec_status_text(rec_status s)
{
    switch (s) {
    case REC_OK: return "valid";
    case REC_SHORT_HEADER: return "short header";
    case REC_BAD_MAGIC: return "bad magic";
    case REC_SHORT_RECORD: return "short payload";
    case REC_BAD_CHECKSUM: return "checksum mismatch";
    }
    return "invalid";
}

/* -- little helpers -------------------------------------------------------- */

/* Emit one log line through opt.log_fn (or stderr). Any thread. */
static void log_line(const file_log *fl, const char *fmt, ...)
{
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (fl->opt.log_fn != NULL)
        fl->opt.log_fn(fl->opt.log_arg, line);
    else
        fprintf(stderr, "%s\n", line);
}

static void seg_path(const file_log *fl, uint64_t first, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%0*" PRIu64 SEG_SUFFIX, fl->dir, SEG_DIGITS, first);
}

/* fsync a directory so that entries created or removed in it are durable.
 * Returns 0 or -errno. */
static int fsync_dir(const char *dir)
{
    int rc = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fsync(fd) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

/* Check the record at p (avail bytes up to the end of the file). On REC_OK
 * fills *rec (payload points into p) and *rec_len. Never reads past avail. */
static rec_status parse_record(const uint8_t *p,
                               size_t avail,
                               oplog_record *rec,
                               size_t *rec_len)
{
    uint32_t len;
    if (avail < REC_HDR)
        return REC_SHORT_HEADER;
    if (get_le32(p) != REC_MAGIC)
        return REC_BAD_MAGIC;
    len = get_le32(p + 16);
    if (avail - REC_HDR < (uint64_t)len + REC_SUM)
        return REC_SHORT_RECORD;
    if (XXH64(p, REC_HDR + (size_t)len, 0) != get_le64(p + REC_HDR + len))
        return REC_BAD_CHECKSUM;
    rec->seq = get_le64(p + 4);
    rec->type = get_le16(p + 12);
    rec->encver = get_le16(p + 14);
    rec->payload = p + REC_HDR;
    rec->len = len;
    *rec_len = REC_FRAME + (size_t)len;
    return REC_OK;
}

/* Look for any valid record starting at an offset in [from, size). Returns 1
 * and its offset and sequence when there is one, else 0. */
static int find_valid_after(const uint8_t *buf,
                            size_t size,
                            size_t from,
                            size_t *at,
                            uint64_t *seq)
{
    static const uint8_t magic[4] = {'W', 'O', 'L', '1'};
    size_t off = from;
    while (off + REC_FRAME <= size) {
        const uint8_t *hit = memmem(buf + off, size - off, magic, sizeof(magic));
        oplog_record rec;
        size_t rec_len;
        if (hit == NULL)
            return 0;
        off = (size_t)(hit - buf);
        if (parse_record(hit, size - off, &rec, &rec_len) == REC_OK) {
            *at = off;
            *seq = rec.seq;
            return 1;
        }
        off++;
    }
    return 0;
}

/* 1 when every byte of buf[from, size) is zero (space never written). */
static int zero_to_end(const uint8_t *buf, size_t from, size_t size)
{
    static const uint8_t zeros[4096];
    while (from < size) {
        size_t n = size - from < sizeof(zeros) ? size - from : sizeof(zeros);
        if (memcmp(buf + from, zeros, n) != 0)
            return 0;
        from += n;
    }
    return 1;
}

/* Where the bytes of fd that may be non-zero end, looking from `from`: the
 * end of the data extent holding `from` when the file system reports no
 * data after it (SEEK_HOLE, then SEEK_DATA failing with ENXIO), else size.
 * A preallocated segment is mostly unwritten extents, which read as zeros:
 * reading them only to check that they are zeros cost a restart most of its
 * time (the kernel zero-fills every page it reads for them). A file system
 * without hole reporting answers SEEK_HOLE with the file's end, which keeps
 * the full check. */
static size_t written_end(int fd, size_t from, size_t size)
{
    off_t hole = lseek(fd, (off_t)from, SEEK_HOLE);
    if (hole < 0 || (size_t)hole >= size)
        return size;
    if (lseek(fd, hole, SEEK_DATA) >= 0 || errno != ENXIO)
        return size;
    return (size_t)hole;
}

/* The end of the non-zero bytes of buf[from, size): what a cut at `from`
 * really removes (the zeros after it are unwritten space). */
static size_t nonzero_end(const uint8_t *buf, size_t from, size_t size)
{
    while (size > from && buf[size - 1] == 0)
        size--;
    return size;
}

/* Give fd its full segment size when opt.preallocate is on and it is smaller;
 * the allocation is synced so that later data syncs find nothing to do for
 * it. A failure is only logged: appends past the end still work. Returns
 * nothing; the file stays usable either way. */
static void preallocate(file_log *fl, int fd, const char *path)
{
    struct stat st;
    int rc;
    if (!fl->opt.preallocate || fstat(fd, &st) < 0 ||
        (uint64_t)st.st_size >= fl->opt.segment_bytes)
        return;
    rc = posix_fallocate(fd, 0, (off_t)fl->opt.segment_bytes);
    if (rc == 0 && fsync(fd) < 0)
        rc = errno;
    if (rc != 0)
        log_line(fl, "oplog: %s: cannot preallocate %" PRIu64 " bytes (%s): appending instead",
                 path, fl->opt.segment_bytes, strerror(rc));
}

/* A read-only view of one segment file. */
typedef struct seg_map {
    int fd;
    const uint8_t *buf; /* NULL when the file is empty */
    size_t size;
} seg_map;

static int seg_map_open(const char *path, seg_map *m, char *err, size_t errlen)
{
    int rc;
    struct stat st;
    m->buf = NULL;
    m->size = 0;
    m->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (m->fd < 0) {
        rc = -errno;
        wm_errbuf(err, errlen, "oplog: %s: cannot open: %s", path, strerror(-rc));
        return SMP_EIO;
    }
    if (fstat(m->fd, &st) < 0) {
        rc = -errno;
        wm_errbuf(err, errlen, "oplog: %s: cannot stat: %s", path, strerror(-rc));
        goto close_fd;
    }
    m->size = (size_t)st.st_size;
    if (m->size > 0) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, m->fd, 0);
        if (p == MAP_FAILED) {
            rc = -errno;
            wm_errbuf(err, errlen, "oplog: %s: cannot map: %s", path, strerror(-rc));
            goto close_fd;
        }
        m->buf = p;
    }
    return 0;
close_fd:
    close(m->fd);
    m->fd = -1;
    return SMP_EIO;
}

static void seg_map_close(seg_map *m)
{
    if (m->buf != NULL)
        munmap((void *)m->buf, m->size);
    if (m->fd >= 0)
        close(m->fd);
    m->buf = NULL;
    m->fd = -1;
}

/* -- recovery ---------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Parse "<18 digits>.log" into its first sequence; 0 when it is not a
 * segment name. */
static uint64_t seg_name_seq(const char *name)
{
    uint64_t v = 0;
    for (int i = 0; i < SEG_DIGITS; i++) {
        if (name[i] < '0' || name[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(name[i] - '0');
    }
    if (strcmp(name + SEG_DIGITS, SEG_SUFFIX) != 0)
        return 0;
    return v;
}

static int segs_reserve(file_log *fl, size_t n)
{
    uint64_t *p;
    size_t cap;
    if (n <= fl->segs_cap)
        return 0;
    cap = fl->segs_cap ? fl->segs_cap * 2 : 16;
    while (cap < n)
        cap *= 2;
    p = realloc(fl->segs, cap * sizeof(*p));
    if (p == NULL)
        return SMP_ENOMEM;
    fl->segs = p;
    fl->segs_cap = cap;
    return 0;
}

/* Collect the segment files of fl->dir, sorted. Files that are not segments
 * are ignored. A segment named 0 refuses the open. */
static int list_segments(file_log *fl, char *err, size_t errlen)
{
    int rc = 0;
    struct dirent *de;
    DIR *d = opendir(fl->dir);
    if (d == NULL) {
        wm_errbuf(err, errlen, "oplog: %s: cannot list: %s", fl->dir, strerror(errno));
        return SMP_EIO;
    }
    while ((de = readdir(d)) != NULL) {
        uint64_t seq;
        if (strlen(de->d_name) != SEG_DIGITS + strlen(SEG_SUFFIX))
            continue;
        seq = seg_name_seq(de->d_name);
        if (seq == 0) {
            if (strspn(de->d_name, "0") == SEG_DIGITS &&
                strcmp(de->d_name + SEG_DIGITS, SEG_SUFFIX) == 0) {
                wm_errbuf(err, errlen, "oplog: %s/%s: a segment cannot start at seq 0",
                        fl->dir, de->d_name);
                rc = SMP_EPROTO;
                goto close_dir;
            }
            continue;
        }
        if ((rc = segs_reserve(fl, fl->nsegs + 1)) < 0) {
            wm_errbuf(err, errlen, "oplog: out of memory listing %s", fl->dir);
            goto close_dir;
        }
        fl->segs[fl->nsegs++] = seq;
    }
    if (fl->nsegs > 0)
        qsort(fl->segs, fl->nsegs, sizeof(fl->segs[0]), cmp_u64);
close_dir:
    closedir(d);
    return rc;
}

/* Verify segment idx, whose first record must carry *expect; on return
 * *expect is the sequence after its last record. When the segment is the last
 * one and ends in a torn tail, *cut_at is set to the offset to cut it at
 * (else to UINT64_MAX) and *cut_what describes the bad record. Refuses
 * (SMP_EPROTO, message in err) any other record that does not verify. Reads
 * only. */
static int scan_segment(file_log *fl,
                        size_t idx,
                        uint64_t *expect,
                        uint64_t *data_end,
                        uint64_t *cut_at,
                        uint64_t *cut_len,
                        rec_status *cut_what,
                        char *err,
                        size_t errlen)
{
    int rc;
    char path[PATH_MAX];
    seg_map m;
    size_t off = 0;
    int is_last = idx + 1 == fl->nsegs;

    *cut_at = UINT64_MAX;
    seg_path(fl, fl->segs[idx], path, sizeof(path));
    if ((rc = seg_map_open(path, &m, err, errlen)) < 0)
        return rc;
    while (off < m.size) {
        oplog_record rec;
        size_t rec_len = 0, valid_at = 0;
        uint64_t valid_seq = 0;
        rec_status st = parse_record(m.buf + off, m.size - off, &rec, &rec_len);
        if (st == REC_OK) {
            if (rec.seq != *expect) {
                wm_errbuf(err, errlen,
                        "oplog: %s: offset %zu: record has seq %" PRIu64
                        ", expected %" PRIu64 " (sequence gap); refusing to open",
                        path, off, rec.seq, *expect);
                rc = SMP_EPROTO;
                goto unmap;
            }
            (*expect)++;
            off += rec_len;
            continue;
        }
        size_t end = written_end(m.fd, off, m.size);
        if (zero_to_end(m.buf, off, end))
            break; /* the rest was never written */
        if (find_valid_after(m.buf, m.size, off + 1, &valid_at, &valid_seq)) {
            wm_errbuf(err, errlen,
                    "oplog: %s: offset %zu: record seq %" PRIu64 " is corrupt (%s) "
                    "but a valid record (seq %" PRIu64 ") follows at offset %zu: "
                    "not a torn tail; refusing to open",
                    path, off, *expect, rec_status_text(st), valid_seq, valid_at);
            rc = SMP_EPROTO;
            goto unmap;
        }
        if (!is_last) {
            wm_errbuf(err, errlen,
                    "oplog: %s: offset %zu: record seq %" PRIu64 " is corrupt (%s) "
                    "in a segment that is not the last: not a torn tail; "
                    "refusing to open",
                    path, off, *expect, rec_status_text(st));
            rc = SMP_EPROTO;
            goto unmap;
        }
        *cut_at = off;
        *cut_len = nonzero_end(m.buf, off, end) - off;
        *cut_what = st;
        break;
    }
    *data_end = off;
    rc = 0;
unmap:
    seg_map_close(&m);
    return rc;
}

/* Cut the last segment at offset cut_at and make the cut durable. cut_len
 * (for the log line) is how far non-zero bytes reached after it: the rest is
 * unwritten space. */
static int cut_torn_tail(file_log *fl,
                         uint64_t cut_at,
                         uint64_t cut_len,
                         uint64_t seq,
                         rec_status what,
                         char *err,
                         size_t errlen)
{
    int rc = 0;
    char path[PATH_MAX];
    int fd;

    seg_path(fl, fl->segs[fl->nsegs - 1], path, sizeof(path));
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        wm_errbuf(err, errlen, "oplog: %s: cannot open to cut the torn tail: %s",
                path, strerror(errno));
        return SMP_EIO;
    }
    if (ftruncate(fd, (off_t)cut_at) < 0 || fsync(fd) < 0) {
        wm_errbuf(err, errlen, "oplog: %s: cannot cut the torn tail at offset %" PRIu64
                ": %s", path, cut_at, strerror(errno));
        rc = SMP_EIO;
        goto close_fd;
    }
    log_line(fl, "oplog: %s: torn tail at offset %" PRIu64 " (record seq %" PRIu64
             ": %s): cut there, %" PRIu64 " bytes after it were not zero",
             path, cut_at, seq, rec_status_text(what), cut_len);
close_fd:
    close(fd);
    return rc;
}

/* Create the segment whose first record is first and make its name durable.
 * Returns the open fd (write only) or a negative code. */
static int create_segment(file_log *fl, uint64_t first)
{
    int rc;
    char path[PATH_MAX];
    int fd;
    seg_path(fl, first, path, sizeof(path));
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    preallocate(fl, fd, path);
    if ((rc = fsync_dir(fl->dir)) < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

/* Create dir when it does not exist (one level) and make that durable. */
static int ensure_dir(const char *dir, char *err, size_t errlen)
{
    int rc;
    char parent[PATH_MAX];
    char *slash;
    if (mkdir(dir, 0755) == 0) {
        snprintf(parent, sizeof(parent), "%s", dir);
        slash = strrchr(parent, '/');
        if (slash == parent)
            slash[1] = '\0';
        else if (slash != NULL)
            *slash = '\0';
        else
            snprintf(parent, sizeof(parent), ".");
        if ((rc = fsync_dir(parent)) < 0) {
            wm_errbuf(err, errlen, "oplog: %s: cannot sync after mkdir: %s",
                    parent, strerror(-rc));
            return SMP_EIO;
        }
        return 0;
    }
    if (errno == EEXIST)
        return 0;
    wm_errbuf(err, errlen, "oplog: %s: cannot create: %s", dir, strerror(errno));
    return SMP_EIO;
}

/* Read every segment, cut a torn tail, and leave fl->last_seq and the last
 * segment's fd and size ready for the writer. Refuses without modifying
 * anything when a check other than the torn tail fails. */
static int recover(file_log *fl, char *err, size_t errlen)
{
    int rc;
    uint64_t expect, data_end = 0, cut_at = UINT64_MAX, cut_len = 0;
    rec_status cut_what = REC_OK;
    char path[PATH_MAX];

    if ((rc = list_segments(fl, err, errlen)) < 0)
        return rc;
    if (fl->nsegs == 0) {
        if ((rc = segs_reserve(fl, 1)) < 0) {
            wm_errbuf(err, errlen, "oplog: out of memory");
            return rc;
        }
        if ((rc = create_segment(fl, 1)) < 0) {
            wm_errbuf(err, errlen, "oplog: %s: cannot create the first segment: %s",
                    fl->dir, strerror(-rc));
            return SMP_EIO;
        }
        fl->fd = rc;
        fl->segs[fl->nsegs++] = 1;
        fl->cur_size = 0;
        fl->zeroed_to = 0;
        fl->last_seq = 0;
        return 0;
    }
    expect = fl->segs[0];
    for (size_t i = 0; i < fl->nsegs; i++) {
        if (fl->segs[i] != expect) {
            char prev[PATH_MAX];
            seg_path(fl, fl->segs[i], path, sizeof(path));
            seg_path(fl, fl->segs[i - 1], prev, sizeof(prev));
            wm_errbuf(err, errlen,
                    "oplog: %s: segment starts at seq %" PRIu64 " but %s ends at seq %"
                    PRIu64 ": sequence gap; refusing to open",
                    path, fl->segs[i], prev, expect - 1);
            return SMP_EPROTO;
        }
        if ((rc = scan_segment(fl, i, &expect, &data_end, &cut_at, &cut_len, &cut_what, err,
                               errlen)) < 0)
            return rc;
    }
    if (cut_at != UINT64_MAX &&
        (rc = cut_torn_tail(fl, cut_at, cut_len, expect, cut_what, err, errlen)) < 0)
        return rc;
    fl->last_seq = expect - 1;

    seg_path(fl, fl->segs[fl->nsegs - 1], path, sizeof(path));
    fl->fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fl->fd < 0) {
        wm_errbuf(err, errlen, "oplog: %s: cannot open for appending: %s",
                path, strerror(errno));
        return SMP_EIO;
    }
    fl->cur_size = data_end; /* the next record goes right after the last */
    fl->zeroed_to = data_end; /* not known past the data: zero it again */
    preallocate(fl, fl->fd, path);
    return 0;
}

/* -- the writer thread --------------------------------------------------------- */

/* Write all iov entries at offset off (the array is consumed). Returns 0 or
 * -errno. */
static int write_all(int fd, struct iovec *iov, int n, uint64_t off)
{
    while (n > 0) {
        int cnt = n > IOV_MAX ? IOV_MAX : n;
        ssize_t w = pwritev(fd, iov, cnt, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        off += (uint64_t)w;
        while (w > 0 && n > 0) {
            if ((size_t)w >= iov->iov_len) {
                w -= (ssize_t)iov->iov_len;
                iov++;
                n--;
            } else {
                iov->iov_base = (uint8_t *)iov->iov_base + w;
                iov->iov_len -= (size_t)w;
                w = 0;
            }
        }
    }
    return 0;
}

/* Start a new segment for the record first (the current one is durable and
 * past segment_bytes). Writer thread. Returns 0 or -errno. */
static int roll_segment(file_log *fl, uint64_t first)
{
    int rc, fd;
    pthread_mutex_lock(&fl->pipe.mu);
    rc = segs_reserve(fl, fl->nsegs + 1);
    pthread_mutex_unlock(&fl->pipe.mu);
    if (rc < 0)
        return -ENOMEM;
    if ((fd = create_segment(fl, first)) < 0)
        return fd;
    pthread_mutex_lock(&fl->pipe.mu);
    fl->segs[fl->nsegs++] = first;
    pthread_mutex_unlock(&fl->pipe.mu);
    close(fl->fd);
    fl->fd = fd;
    fl->cur_size = 0;
    fl->zeroed_to = 0;
    return 0;
}

/* With opt.preallocate, once the data is to reach past zeroed_to (end is
 * where it will stop), write zeros from end to ZERO_AHEAD bytes past it
 * (never past the segment's size), so the next sync turns a run of
 * preallocated blocks into written ones in one go (see the top of the
 * file). Only space after the data is written. It only saves work: when a
 * write fails (a full disk with room left for the records, a file size
 * limit), that is logged and no more zeros are tried in this segment; the
 * records are written all the same. Writer thread. */
static void zero_ahead(file_log *fl, uint64_t end)
{
    static const uint8_t zeros[ZERO_AHEAD];
    uint64_t at = end, stop;
    if (!fl->opt.preallocate || fl->zeroed_to >= end) return;
    stop = end + ZERO_AHEAD < fl->opt.segment_bytes ? end + ZERO_AHEAD : fl->opt.segment_bytes;
    while (at < stop) {
        ssize_t w = pwrite(fl->fd, zeros, (size_t)(stop - at), (off_t)at);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            log_line(fl, "oplog: cannot write zeros ahead of the data at offset %" PRIu64
                     " (%s): syncs go on converting blocks one by one", at, strerror(errno));
            fl->zeroed_to = fl->opt.segment_bytes;
            return;
        }
        at += (uint64_t)w;
    }
    fl->zeroed_to = stop > end ? stop : end;
}

/* Write one group commit and sync it. Writer thread. On failure the bytes
 * that were not made durable are cut off again as far as possible, and the
 * failure is logged. Returns 0 or -errno (an oplog_pipe_write_fn). */
static int write_batch(void *be, oplog_entry_list *batch, size_t n, uint64_t *bytes)
{
    file_log *fl = be;
    int rc;
    int i = 0;
    uint64_t total = 0;
    const char *what = "write";
    char path[PATH_MAX];

    if (fl->cur_size >= fl->opt.segment_bytes && fl->cur_size > 0) {
        what = "segment roll";
        if ((rc = roll_segment(fl, batch->head->seq)) < 0)
            goto log_failure;
    }
    (void)n;
    for (oplog_entry *e = batch->head; e != NULL; e = e->next) {
        size_t body = e->rec_len - REC_SUM;
        put_le64(e->rec + body, XXH64(e->rec, body, 0));
        fl->iov[i].iov_base = e->rec;
        fl->iov[i].iov_len = e->rec_len;
        total += e->rec_len;
        i++;
    }
    what = "write";
    zero_ahead(fl, fl->cur_size + total);
    if ((rc = write_all(fl->fd, fl->iov, i, fl->cur_size)) < 0)
        goto truncate_back;
    what = "fdatasync";
    fl->sync_attempts++;
    if (fl->opt.test_fail_sync_at != 0 &&
        fl->sync_attempts >= fl->opt.test_fail_sync_at)
        rc = -EIO;
    else if (fdatasync(fl->fd) < 0)
        rc = -errno;
    if (rc < 0)
        goto truncate_back;
    fl->cur_size += total;
    *bytes = total;
    return 0;

truncate_back:
    /* Best effort: what was not synced may still reach the disk; recovery
     * would then find records whose callbacks reported a failure. */
    if (ftruncate(fl->fd, (off_t)fl->cur_size) == 0)
        (void)fdatasync(fl->fd);
log_failure:
    pthread_mutex_lock(&fl->pipe.mu);
    seg_path(fl, fl->segs[fl->nsegs - 1], path, sizeof(path));
    if (fl->pipe.failed_why[0] == '\0')
        snprintf(fl->pipe.failed_why, sizeof(fl->pipe.failed_why),
                 "%s failed at seq %" PRIu64 " (%s) in %.200s", what, batch->head->seq, strerror(-rc),
                 path);
    pthread_mutex_unlock(&fl->pipe.mu);
    log_line(fl, "oplog: %s: %s failed at seq %" PRIu64 " (%s): the log is "
             "read-only now", path, what, batch->head->seq, strerror(-rc));
    return rc;
}

/* Drop the segments entirely below seq, oldest first, syncing the directory
 * after each so that the survivors always form a contiguous suffix. Writer
 * thread. A failure is logged and stops the drop. */
static void drop_segments(file_log *fl, uint64_t seq)
{
    size_t k = 0, dropped = 0;
    char path[PATH_MAX];
    int rc;

    pthread_mutex_lock(&fl->pipe.mu);
    while (k + 1 < fl->nsegs && fl->segs[k + 1] <= seq)
        k++;
    pthread_mutex_unlock(&fl->pipe.mu);
    /* Only this thread changes segs, so segs[0..k) stays put unlocked. */
    for (; dropped < k; dropped++) {
        seg_path(fl, fl->segs[dropped], path, sizeof(path));
        if (unlink(path) < 0 && errno != ENOENT) {
            log_line(fl, "oplog: %s: cannot remove: %s", path, strerror(errno));
            break;
        }
        if ((rc = fsync_dir(fl->dir)) < 0) {
            log_line(fl, "oplog: %s: cannot sync after removing %s: %s",
                     fl->dir, path, strerror(-rc));
            dropped++;
            break;
        }
    }
    if (dropped == 0)
        return;
    pthread_mutex_lock(&fl->pipe.mu);
    memmove(fl->segs, fl->segs + dropped, (fl->nsegs - dropped) * sizeof(fl->segs[0]));
    fl->nsegs -= dropped;
    pthread_mutex_unlock(&fl->pipe.mu);
}

/* The writer: group commits until stopped, then drains the queue; between
 * batches it drops the segments a truncation request no longer needs. */
static void *writer_main(void *arg)
{
    file_log *fl = arg;
    oplog_pipe *p = &fl->pipe;
    prctl(PR_SET_NAME, "oplog-writer"); /* what an operator (or a test) finds it by */
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->queue.head == NULL && !p->stop && p->trunc_req == 0)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->trunc_req != 0) {
            uint64_t seq = p->trunc_req;
            p->trunc_req = 0;
            if (!p->failed) {
                pthread_mutex_unlock(&p->mu);
                drop_segments(fl, seq);
                pthread_mutex_lock(&p->mu);
            }
            continue;
        }
        if (p->queue.head == NULL)
            break; /* stopped and drained */
        oplog_pipe_write_batch_locked(p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* -- the loop side ---------------------------------------------------------------- */

static int file_append(oplog *log,
                       uint16_t type,
                       uint16_t encver,
                       const void *payload,
                       size_t len,
                       oplog_durable_fn cb,
                       void *arg,
                       uint64_t *out_seq)
{
    file_log *fl = (file_log *)log;
    uint64_t seq = fl->last_seq + 1;
    oplog_entry *e;

    if (fl->pipe.closing)
        return SMP_ESTATE;
    if (fl->pipe.failed_seen)
        return SMP_EDURABILITY;
    if (len > fl->opt.max_record_bytes)
        return SMP_ERANGE;
    /* The writer fills the checksum in, off the loop thread. */
    e = oplog_pipe_record_new(&fl->pipe, REC_MAGIC, seq, type, encver, payload, len,
                              cb, arg);
    if (e == NULL)
        return SMP_ENOMEM;

    oplog_pipe_stage(&fl->pipe, e);
    fl->last_seq = seq;
    fl->appended = 1;
    if (out_seq != NULL)
        *out_seq = seq;
    return 0;
}

static int file_replay(oplog *log,
                       uint64_t after_seq,
                       oplog_replay_fn fn,
                       void *arg,
                       char *err,
                       size_t errlen)
{
    file_log *fl = (file_log *)log;
    int rc = 0;
    uint64_t *segs;
    size_t nsegs;
    char path[PATH_MAX];

    if (fl->appended || fl->pipe.closing) {
        wm_errbuf(err, errlen, "oplog: replay must come before the first append");
        return SMP_ESTATE;
    }
    pthread_mutex_lock(&fl->pipe.mu);
    nsegs = fl->nsegs;
    segs = malloc(nsegs * sizeof(*segs));
    if (segs != NULL)
        memcpy(segs, fl->segs, nsegs * sizeof(*segs));
    pthread_mutex_unlock(&fl->pipe.mu);
    if (segs == NULL) {
        wm_errbuf(err, errlen, "oplog: out of memory");
        return SMP_ENOMEM;
    }
    if (segs[0] > after_seq + 1) {
        seg_path(fl, segs[0], path, sizeof(path));
        wm_errbuf(err, errlen, "oplog: records %" PRIu64 "..%" PRIu64 " are missing: "
                "the log starts at seq %" PRIu64 " (%s)",
                after_seq + 1, segs[0] - 1, segs[0], path);
        rc = SMP_EPROTO;
        goto free_segs;
    }
    if (fl->last_seq < after_seq) {
        wm_errbuf(err, errlen, "oplog: the log ends at seq %" PRIu64 ", before seq %"
                PRIu64 " that replay starts after", fl->last_seq, after_seq);
        rc = SMP_EPROTO;
        goto free_segs;
    }
    for (size_t i = 0; i < nsegs; i++) {
        seg_map m;
        size_t off = 0;
        uint64_t expect = segs[i];
        uint64_t end = i + 1 < nsegs ? segs[i + 1] - 1 : fl->last_seq;
        if (end <= after_seq)
            continue;
        seg_path(fl, segs[i], path, sizeof(path));
        if ((rc = seg_map_open(path, &m, err, errlen)) < 0)
            goto free_segs;
        while (expect <= end) { /* recovery found where the records end */
            oplog_record rec;
            size_t rec_len = 0;
            rec_status st = parse_record(m.buf + off, m.size - off, &rec, &rec_len);
            if (st != REC_OK || rec.seq != expect) {
                wm_errbuf(err, errlen, "oplog: %s: offset %zu: record seq %" PRIu64
                        " no longer verifies (%s)", path, off, expect,
                        st != REC_OK ? rec_status_text(st) : "sequence gap");
                rc = SMP_EPROTO;
                break;
            }
            expect++;
            off += rec_len;
            if (rec.seq <= after_seq)
                continue;
            if ((rc = fn(arg, &rec)) < 0) {
                wm_errbuf(err, errlen, "oplog: replay stopped at seq %" PRIu64 ": %s",
                        rec.seq, smp_strerror(rc));
                break;
            }
        }
        seg_map_close(&m);
        if (rc < 0)
            goto free_segs;
    }
free_segs:
    free(segs);
    return rc;
}

static uint64_t file_last_seq(const oplog *log)
{
    return ((const file_log *)log)->last_seq;
}

static uint64_t file_durable_seq(const oplog *log)
{
    return ((const file_log *)log)->pipe.durable_seq;
}

/* The first sequence of the oldest segment (0: no segment). */
static uint64_t file_first_seq(const oplog *log)
{
    file_log *fl = (file_log *)log;
    pthread_mutex_lock(&fl->pipe.mu);
    uint64_t first = fl->nsegs > 0 ? fl->segs[0] : 0;
    pthread_mutex_unlock(&fl->pipe.mu);
    return first;
}

static int file_truncate_before(oplog *log, uint64_t seq)
{
    file_log *fl = (file_log *)log;
    if (fl->pipe.closing)
        return SMP_ESTATE;
    return oplog_pipe_request_truncate(&fl->pipe, seq);
}

static void file_stats(const oplog *log, oplog_stats *out)
{
    oplog_pipe_stats(&((file_log *)log)->pipe, out);
}

/* Free what open allocated (not the pipe's mutex and cond). */
static void free_log(file_log *fl)
{
    free(fl->iov);
    free(fl->segs);
    free(fl->dir);
    free(fl);
}

/* The pipe's handles are closed: free the log. */
static void release_log(void *be)
{
    free_log(be);
}

static void file_close(oplog *log)
{
    file_log *fl = (file_log *)log;
    if (fl->pipe.closing)
        return;
    oplog_pipe_stop(&fl->pipe);
    oplog_pipe_deliver(&fl->pipe);
    if (fl->fd >= 0)
        close(fl->fd);
    fl->fd = -1;
    oplog_pipe_close_handles(&fl->pipe);
}

static const oplog_ops file_ops = {
    .name = "file",
    .replay = file_replay,
    .append = file_append,
    .last_seq = file_last_seq,
    .durable_seq = file_durable_seq,
    .truncate_before = file_truncate_before,
    .stats = file_stats,
    .close = file_close,
    .first_seq = file_first_seq,
};

int oplog_file_open(uv_loop_t *loop,
                    const oplog_file_options *opt,
                    oplog **out,
                    char *err,
                    size_t errlen)
{
    int rc;
    file_log *fl;
    oplog_pipe_conf pc;

    if (loop == NULL || opt == NULL || opt->dir == NULL || opt->dir[0] == '\0' ||
        out == NULL) {
        wm_errbuf(err, errlen, "oplog: open needs a loop, options with a dir, and out");
        return SMP_EINVAL;
    }
    if (opt->max_record_bytes > UINT32_MAX - REC_FRAME) {
        wm_errbuf(err, errlen, "oplog: max_record_bytes %" PRIu32 " is too large",
                opt->max_record_bytes);
        return SMP_EINVAL;
    }
    fl = calloc(1, sizeof(*fl));
    if (fl == NULL) {
        wm_errbuf(err, errlen, "oplog: out of memory");
        return SMP_ENOMEM;
    }
    fl->base.ops = &file_ops;
    fl->loop = loop;
    fl->fd = -1;
    fl->opt = *opt;
    if (fl->opt.segment_bytes == 0)
        fl->opt.segment_bytes = DEFAULT_SEGMENT_BYTES;
    if (fl->opt.max_batch_records == 0)
        fl->opt.max_batch_records = DEFAULT_MAX_BATCH;
    if (fl->opt.max_record_bytes == 0)
        fl->opt.max_record_bytes = DEFAULT_MAX_RECORD;
    fl->dir = strdup(opt->dir);
    fl->iov = calloc(fl->opt.max_batch_records, sizeof(*fl->iov));
    if (fl->dir == NULL || fl->iov == NULL) {
        wm_errbuf(err, errlen, "oplog: out of memory");
        rc = SMP_ENOMEM;
        goto free_log;
    }
    fl->opt.dir = fl->dir;
    if ((rc = ensure_dir(fl->dir, err, errlen)) < 0)
        goto free_log;
    if ((rc = recover(fl, err, errlen)) < 0)
        goto free_log;
    fl->pipe.durable_seq = fl->last_seq;

    pc = (oplog_pipe_conf){.be = fl, .max_batch_records = fl->opt.max_batch_records,
                           .write = write_batch,
                           .release = release_log};
    if ((rc = oplog_pipe_init(&fl->pipe, &pc, err, errlen)) < 0)
        goto close_fd;
    if (pthread_create(&fl->pipe.thread, NULL, writer_main, fl) != 0) {
        wm_errbuf(err, errlen, "oplog: cannot start the writer thread");
        rc = SMP_ENOMEM;
        goto destroy_locks;
    }
    /* The writer sends on the handle only after a batch, and no record can be
     * appended before open returns, so creating it now is early enough. */
    if ((rc = oplog_pipe_start_handles(&fl->pipe, loop, err, errlen)) < 0)
        goto stop_thread;
    *out = &fl->base;
    return 0;

stop_thread:
    oplog_pipe_stop_thread(&fl->pipe);
destroy_locks:
    oplog_pipe_destroy_locks(&fl->pipe);
close_fd:
    close(fl->fd);
free_log:
    free_log(fl);
    return rc;
}
