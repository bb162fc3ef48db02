/* snapshot.c -- the master's snapshot file: build in memory, write durably,
 * load with complete validation.
 *
 * Byte layout (all integers little endian, XXH64 with seed 0):
 *
 *   header   32 bytes   magic "WMSNAPSH", u32 format version, u32 section
 *                       count, u64 last included OpLog sequence, u64 XXH64 of
 *                       the 24 bytes before it
 *   section  repeated   frame of 32 bytes: u16 name length (1..64), u16
 *                       encoding version, u32 reserved (0), u64 body length,
 *                       u64 XXH64 of the body, u64 XXH64 of the 24 frame bytes
 *                       before it followed by the name; then the name (no NUL)
 *                       and the body
 *   trailer  24 bytes   magic "WMSNAPND", u64 length of the whole file, u64
 *                       XXH64 of every byte of the file before this field
 *
 * Every byte is under some checksum, every length is checked against the bytes
 * that are really there before it is used, and a truncated file always fails
 * (the trailer must sit exactly at the end and agree with the file length).
 * Loading maps the file read-only (no copy of it, no fresh memory for it:
 * the pages are the page cache's), brings its pages in a piece at a time and
 * validates it all before it returns the image; the one section a caller may
 * ask for early (snap_early) goes out
 * before that, once the header, its frame and its own bytes have checked --
 * or, streamed, once its frame has, its bytes following on a feed and
 * checked with the rest of the file.
 * Writing goes .tmp (O_EXCL) -> fsync -> rename without replace -> fsync of
 * the directory, under an flock() of the directory so that two writers never
 * race on the same files. */
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */

#include "snapshot.h"

#include "host_bulk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#define SNAP_MAGIC "WMSNAPSH"
#define SNAP_TRAILER_MAGIC "WMSNAPND"
#define SNAP_HEADER_LEN 32u
#define SNAP_FRAME_LEN 32u
#define SNAP_TRAILER_LEN 24u
#define SNAP_PREFIX "snapshot-"
#define SNAP_SEQ_DIGITS 20u
#define SNAP_SUFFIX ".snap"
#define SNAP_TMP_SUFFIX ".snap.tmp"
/* "snapshot-" + 20 digits + ".snap.tmp" + NUL */
#define SNAP_FILE_NAME_MAX (sizeof(SNAP_PREFIX) - 1 + SNAP_SEQ_DIGITS + sizeof(SNAP_TMP_SUFFIX))

/* A non-NULL address for empty sections and readers. */
static const uint8_t snap_empty[1];

/* ------------------------------------------------------------------------ */
/* Little-endian encoding and small helpers                                   */
/* ------------------------------------------------------------------------ */

static void snap_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void snap_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void snap_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t snap_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t snap_get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t snap_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Format one line into err (if any). Always returns rc, for tail calls. */
static int snap_fail(int rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int snap_fail(int rc, char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* Map an errno of a failed write path to an SMP code. */
static int snap_errno_rc(int e)
{
    if (e == ENOSPC || e == EDQUOT) return SMP_ENOSPC;
    if (e == ENOMEM) return SMP_ENOMEM;
    return SMP_EIO;
}

/* 1 if name is 1..SNAP_NAME_MAX bytes of printable ASCII without spaces. */
static int snap_name_valid_n(const char *name, size_t n)
{
    if (n == 0 || n > SNAP_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x21 || c > 0x7e) return 0;
    }
    return 1;
}

static int snap_name_valid(const char *name)
{
    if (name == NULL) return 0;
    size_t n = strnlen(name, SNAP_NAME_MAX + 1);
    return snap_name_valid_n(name, n);
}

/* Copy a possibly damaged name into out (SNAP_NAME_MAX + 1 bytes) for a
 * message, replacing what is not printable by '?'. */
static void snap_name_for_message(const uint8_t *p, size_t n, char *out)
{
    if (n > SNAP_NAME_MAX) n = SNAP_NAME_MAX;
    for (size_t i = 0; i < n; i++)
        out[i] = (p[i] >= 0x20 && p[i] <= 0x7e && p[i] != '\'') ? (char)p[i] : '?';
    out[n] = '\0';
}

/* Parse "snapshot-<20 digits><suffix>"; 1 with *seq set if name matches. */
static int snap_parse_name(const char *name, const char *suffix, uint64_t *seq)
{
    size_t plen = sizeof(SNAP_PREFIX) - 1;
    if (strncmp(name, SNAP_PREFIX, plen) != 0) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < SNAP_SEQ_DIGITS; i++) {
        char c = name[plen + i];
        if (c < '0' || c > '9') return 0;
        unsigned d = (unsigned)(c - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    if (strcmp(name + plen + SNAP_SEQ_DIGITS, suffix) != 0) return 0;
    *seq = v;
    return 1;
}

static void snap_format_name(char *out, uint64_t seq, const char *suffix)
{
    snprintf(out, SNAP_FILE_NAME_MAX, SNAP_PREFIX "%020" PRIu64 "%s", seq, suffix);
}

/* ------------------------------------------------------------------------ */
/* Building                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct snap_bsec {
    char name[SNAP_NAME_MAX + 1];
    uint16_t encver;
    uint8_t *data;      /* owned; NULL when len is 0 */
    size_t len;
    size_t cap;         /* data's room: a mapping when >= SNAP_MAP_MIN
                         * (snap_buf_free), else malloc's */
} snap_bsec;

/* A section's bytes grow in a buffer of their own: from malloc while
 * small, then, from SNAP_MAP_MIN on, in a mapping of its own that mremap
 * grows without copying (in place, or by moving its pages), its pages
 * mapped a window ahead of the writes (host_bulk_ready). The section of a
 * large store is hundreds of MB: grown by realloc it was copied at each
 * doubling, into memory touched for the first time, then faulted in a page
 * at a time as it was written. A buffer of cap >= SNAP_MAP_MIN is a
 * mapping, one below it malloc's: the growth keeps that true, and
 * snap_buf_free relies on it. */
#define SNAP_MAP_MIN ((size_t)1 << 20)

static void snap_buf_free(uint8_t *buf, size_t cap)
{
    if (cap >= SNAP_MAP_MIN)
        host_bulk_free(buf, cap);
    else
        free(buf);
}

/* Room for need bytes in w (need > w->cap): the capacity doubled until it
 * holds them -- by realloc below SNAP_MAP_MIN, by a new mapping the bytes
 * are copied into when it reaches it, by mremap above. SMP_OK or
 * SMP_ENOMEM (w unchanged). */
static int snap_writer_grow(smp_writer *w, size_t need)
{
    size_t ncap = w->cap ? w->cap : 256;
    while (ncap < need) ncap = (ncap > SIZE_MAX / 2) ? need : ncap * 2;
    if (ncap >= SNAP_MAP_MIN) /* whole pages: host_bulk_ready may map to the end */
        ncap = (ncap + SNAP_MAP_MIN - 1) / SNAP_MAP_MIN * SNAP_MAP_MIN;
    uint8_t *nb;
    if (ncap < SNAP_MAP_MIN) {
        if ((nb = realloc(w->buf, ncap)) == NULL) return SMP_ENOMEM;
    } else if (w->cap < SNAP_MAP_MIN) {
        if ((nb = host_bulk_alloc(ncap)) == NULL) return SMP_ENOMEM;
        if (w->len) memcpy(nb, w->buf, w->len);
        free(w->buf);
        w->ready = 0;
    } else {
        void *m = mremap(w->buf, w->cap, ncap, MREMAP_MAYMOVE);
        if (m == MAP_FAILED) return SMP_ENOMEM;
        nb = m;
    }
    w->buf = nb;
    w->cap = ncap;
    return SMP_OK;
}

struct snap_builder {
    uint64_t last_seq;
    snap_bsec *secs;
    size_t n;
    size_t cap;
    smp_writer w;                       /* the one writer, reused per section */
    char open_name[SNAP_NAME_MAX + 1];  /* the section being written */
    uint16_t open_encver;
};

snap_builder *snap_builder_new(uint64_t last_seq)
{
    snap_builder *b = calloc(1, sizeof(*b));
    if (b == NULL) return NULL;
    b->last_seq = last_seq;
    b->w.owner = b;
    return b;
}

void snap_builder_free(snap_builder *b)
{
    if (b == NULL) return;
    for (size_t i = 0; i < b->n; i++) snap_buf_free(b->secs[i].data, b->secs[i].cap);
    free(b->secs);
    snap_buf_free(b->w.buf, b->w.cap);
    free(b);
}

/* Check that a new section called name may be added, and reserve room for it
 * so that adding it cannot fail later. */
static int snap_builder_admit(snap_builder *b, const char *name)
{
    if (!snap_name_valid(name)) return SMP_EINVAL;
    if (b->w.open) return SMP_ESTATE;
    for (size_t i = 0; i < b->n; i++)
        if (strcmp(b->secs[i].name, name) == 0) return SMP_EEXIST;
    if (b->n >= SNAP_SECTIONS_MAX) return SMP_ERANGE;
    if (b->n == b->cap) {
        size_t ncap = b->cap ? b->cap * 2 : 8;
        if (ncap > SNAP_SECTIONS_MAX) ncap = SNAP_SECTIONS_MAX;
        snap_bsec *ns = realloc(b->secs, ncap * sizeof(*ns));
        if (ns == NULL) return SMP_ENOMEM;
        b->secs = ns;
        b->cap = ncap;
    }
    return SMP_OK;
}

/* Append a section to the (already admitted) builder; takes data, of cap
 * bytes' room (snap_buf_free). */
static void snap_builder_push(snap_builder *b, const char *name, uint16_t encver,
                              uint8_t *data, size_t len, size_t cap)
{
    snap_bsec *s = &b->secs[b->n++];
    memset(s, 0, sizeof(*s));
    memcpy(s->name, name, strlen(name) + 1);
    s->encver = encver;
    s->data = data;
    s->len = len;
    s->cap = cap;
}

/* Drop w's buffer: empty, ready for a section. */
static void snap_writer_reset(smp_writer *w)
{
    snap_buf_free(w->buf, w->cap);
    w->buf = NULL;
    w->len = w->cap = w->ready = 0;
}

int snap_builder_begin_section(snap_builder *b, const char *name, uint16_t encver,
                               smp_writer **w)
{
    int rc;
    if (b == NULL || w == NULL) return SMP_EINVAL;
    if ((rc = snap_builder_admit(b, name)) < 0) return rc;
    snap_writer_reset(&b->w);
    b->w.err = 0;
    b->w.open = 1;
    memcpy(b->open_name, name, strlen(name) + 1);
    b->open_encver = encver;
    *w = &b->w;
    return SMP_OK;
}

int snap_builder_end_section(snap_builder *b)
{
    if (b == NULL) return SMP_EINVAL;
    if (!b->w.open) return SMP_ESTATE;
    b->w.open = 0;
    if (b->w.err < 0) {
        int rc = b->w.err;
        snap_writer_reset(&b->w);
        return rc;
    }
    snap_builder_push(b, b->open_name, b->open_encver, b->w.buf, b->w.len, b->w.cap);
    b->w.buf = NULL; /* the section's now */
    b->w.len = b->w.cap = b->w.ready = 0;
    return SMP_OK;
}

int snap_writer_write(smp_writer *w, const void *buf, size_t len)
{
    if (w == NULL) return SMP_EINVAL;
    if (!w->open) return SMP_ESTATE;
    if (w->err < 0) return w->err;
    if (len == 0) return SMP_OK;
    if (buf == NULL) return w->err = SMP_EINVAL;
    if (len > SIZE_MAX - w->len) return w->err = SMP_ERANGE;
    size_t need = w->len + len;
    if (need > w->cap && snap_writer_grow(w, need) < 0) return w->err = SMP_ENOMEM;
    if (w->cap >= SNAP_MAP_MIN) w->ready = host_bulk_ready(w->buf, w->ready, need, w->cap);
    memcpy(w->buf + w->len, buf, len);
    w->len = need;
    return SMP_OK;
}

int snap_builder_add_raw(snap_builder *b, const char *name, uint16_t encver,
                         const void *data, size_t len)
{
    int rc;
    if (b == NULL || (data == NULL && len > 0)) return SMP_EINVAL;
    if ((rc = snap_builder_admit(b, name)) < 0) return rc;
    uint8_t *copy = NULL;
    if (len > 0) {
        if ((copy = malloc(len)) == NULL) return SMP_ENOMEM;
        memcpy(copy, data, len);
    }
    /* malloc's whatever its size: a room below SNAP_MAP_MIN says so */
    snap_builder_push(b, name, encver, copy, len, 0);
    return SMP_OK;
}

/* ------------------------------------------------------------------------ */
/* The directory: listing, stale .tmp files, retention                       */
/* ------------------------------------------------------------------------ */

typedef struct snap_list {
    uint64_t *seqs;
    size_t n;
    size_t cap;
} snap_list;

/* List the snapshot sequences in the directory dfd (not consumed), removing
 * leftover snapshot-*.snap.tmp files on the way when remove_tmp is set.
 * Returns SMP_OK, SMP_EIO (errno-style failure reading the directory) or
 * SMP_ENOMEM; *out is then empty. */
static int snap_scan(int dfd, int remove_tmp, snap_list *out)
{
    int rc = SMP_OK;
    memset(out, 0, sizeof(*out));
    int fd = dup(dfd);
    if (fd < 0) return SMP_EIO;
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return SMP_EIO;
    }
    rewinddir(d);
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (e == NULL) {
            if (errno != 0) rc = SMP_EIO;
            break;
        }
        uint64_t seq;
        if (snap_parse_name(e->d_name, SNAP_TMP_SUFFIX, &seq)) {
            if (remove_tmp) (void)unlinkat(dfd, e->d_name, 0);
            continue;
        }
        if (!snap_parse_name(e->d_name, SNAP_SUFFIX, &seq)) continue;
        if (out->n == out->cap) {
            size_t ncap = out->cap ? out->cap * 2 : 16;
            uint64_t *ns = realloc(out->seqs, ncap * sizeof(*ns));
            if (ns == NULL) {
                rc = SMP_ENOMEM;
                break;
            }
            out->seqs = ns;
            out->cap = ncap;
        }
        out->seqs[out->n++] = seq;
    }
    closedir(d);
    if (rc < 0) {
        free(out->seqs);
        memset(out, 0, sizeof(*out));
    }
    return rc;
}

static int snap_seq_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x < y) - (x > y);
}

/* Delete every snapshot of dfd but the `keep` newest, then sync the
 * directory. Best effort: a snapshot that cannot be deleted stays. */
static void snap_retain(int dfd, uint32_t keep)
{
    snap_list l;
    if (snap_scan(dfd, 0, &l) < 0) return;
    if (l.n > keep) {
        qsort(l.seqs, l.n, sizeof(*l.seqs), snap_seq_desc);
        for (size_t i = keep; i < l.n; i++) {
            char name[SNAP_FILE_NAME_MAX];
            snap_format_name(name, l.seqs[i], SNAP_SUFFIX);
            (void)unlinkat(dfd, name, 0);
        }
        (void)fsync(dfd);
    }
    free(l.seqs);
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */
/* ------------------------------------------------------------------------ */

/* Write all of p to fd and feed it to the whole-file hash. Returns SMP_OK or
 * the mapped errno. */
static int snap_emit(int fd, XXH64_state_t *st, const void *p, size_t n)
{
    const uint8_t *c = p;
    if (n == 0) return SMP_OK;
    (void)XXH64_update(st, p, n);
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return snap_errno_rc(errno);
        }
        c += k;
        n -= (size_t)k;
    }
    return SMP_OK;
}

/* Write the whole snapshot image of b to fd (header, sections, trailer). */
static int snap_emit_all(int fd, const snap_builder *b)
{
    int rc;
    XXH64_state_t st;
    uint8_t hdr[SNAP_HEADER_LEN];
    uint64_t total = SNAP_HEADER_LEN + SNAP_TRAILER_LEN;

    (void)XXH64_reset(&st, 0);
    memcpy(hdr, SNAP_MAGIC, 8);
    snap_put32(hdr + 8, SNAP_FORMAT_VERSION);
    snap_put32(hdr + 12, (uint32_t)b->n);
    snap_put64(hdr + 16, b->last_seq);
    snap_put64(hdr + 24, XXH64(hdr, 24, 0));
    if ((rc = snap_emit(fd, &st, hdr, sizeof(hdr))) < 0) return rc;

    for (size_t i = 0; i < b->n; i++) {
        const snap_bsec *s = &b->secs[i];
        size_t nl = strlen(s->name);
        const uint8_t *body = s->len ? s->data : snap_empty;
        uint8_t fr[SNAP_FRAME_LEN];
        XXH64_state_t fst;
        snap_put16(fr, (uint16_t)nl);
        snap_put16(fr + 2, s->encver);
        snap_put32(fr + 4, 0);
        snap_put64(fr + 8, (uint64_t)s->len);
        snap_put64(fr + 16, XXH64(body, s->len, 0));
        (void)XXH64_reset(&fst, 0);
        (void)XXH64_update(&fst, fr, 24);
        (void)XXH64_update(&fst, s->name, nl);
        snap_put64(fr + 24, XXH64_digest(&fst));
        if ((rc = snap_emit(fd, &st, fr, sizeof(fr))) < 0) return rc;
        if ((rc = snap_emit(fd, &st, s->name, nl)) < 0) return rc;
        if ((rc = snap_emit(fd, &st, body, s->len)) < 0) return rc;
        total += SNAP_FRAME_LEN + nl + (uint64_t)s->len;
    }

    uint8_t tr[SNAP_TRAILER_LEN];
    memcpy(tr, SNAP_TRAILER_MAGIC, 8);
    snap_put64(tr + 8, total);
    (void)XXH64_update(&st, tr, 16);
    snap_put64(tr + 16, XXH64_digest(&st));
    return snap_emit(fd, &st, tr, sizeof(tr));
}

/* Rename tmp to final in dfd without replacing an existing final. Falls back
 * to a plain rename where the file system has no RENAME_NOREPLACE (we hold
 * the directory lock and checked that final does not exist). */
static int snap_rename_noreplace(int dfd, const char *tmp, const char *final)
{
    if (renameat2(dfd, tmp, dfd, final, RENAME_NOREPLACE) == 0) return SMP_OK;
    if (errno == EEXIST) return SMP_EEXIST;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return snap_errno_rc(errno);
    if (renameat(dfd, tmp, dfd, final) == 0) return SMP_OK;
    return snap_errno_rc(errno);
}

int snap_write_file(const snap_builder *b, const char *dir, uint32_t keep,
                    char *path_out, size_t cap)
{
    int rc;
    int dfd = -1, fd = -1;
    char tmp[SNAP_FILE_NAME_MAX], final[SNAP_FILE_NAME_MAX];
    snap_list l;

    if (b == NULL || dir == NULL || keep == 0) return SMP_EINVAL;
    if (b->w.open) return SMP_ESTATE;
    snap_format_name(tmp, b->last_seq, SNAP_TMP_SUFFIX);
    snap_format_name(final, b->last_seq, SNAP_SUFFIX);
    if (path_out != NULL && strlen(dir) + 1 + strlen(final) + 1 > cap) return SMP_ERANGE;

    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return SMP_EIO;
    if (flock(dfd, LOCK_EX | LOCK_NB) < 0) {
        rc = (errno == EWOULDBLOCK) ? SMP_EBUSY : SMP_EIO;
        goto close_dir;
    }
    /* Leftovers of a crashed write go first, and nothing at or after our
     * sequence may exist: a snapshot never replaces or precedes another. */
    if ((rc = snap_scan(dfd, 1, &l)) < 0) goto close_dir;
    for (size_t i = 0; i < l.n; i++)
        if (l.seqs[i] >= b->last_seq) rc = SMP_EEXIST;
    free(l.seqs);
    if (rc < 0) goto close_dir;

    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = snap_errno_rc(errno);
        goto close_dir;
    }
    if ((rc = snap_emit_all(fd, b)) < 0) goto remove_tmp;
    if (fsync(fd) < 0) {
        rc = snap_errno_rc(errno);
        goto remove_tmp;
    }
    rc = close(fd);
    fd = -1;
    if (rc < 0) {
        rc = snap_errno_rc(errno);
        goto remove_tmp;
    }
    if ((rc = snap_rename_noreplace(dfd, tmp, final)) < 0) goto remove_tmp;
    if (fsync(dfd) < 0) {
        rc = snap_errno_rc(errno);
        goto remove_final;
    }
    snap_retain(dfd, keep);
    if (path_out != NULL) snprintf(path_out, cap, "%s/%s", dir, final);
    rc = SMP_OK;
    goto close_dir;

remove_final:
    /* Not known to be durable: the caller must not truncate its log. */
    (void)unlinkat(dfd, final, 0);
    goto close_dir;
remove_tmp:
    if (fd >= 0) close(fd);
    (void)unlinkat(dfd, tmp, 0);
close_dir:
    close(dfd); /* also releases the lock */
    return rc;
}

int snap_file_path(const char *dir, uint64_t last_seq, char *out, size_t cap)
{
    char name[SNAP_FILE_NAME_MAX];
    if (dir == NULL || out == NULL) return SMP_EINVAL;
    snap_format_name(name, last_seq, SNAP_SUFFIX);
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= cap ? SMP_ERANGE : SMP_OK;
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                   */
/* ------------------------------------------------------------------------ */

struct snap_image {
    const uint8_t *buf;     /* the whole file, mapped read-only (snap_empty
                             * for an empty one) */
    size_t size;            /* mapped whole unless buf is snap_empty */
    uint64_t last_seq;
    snap_section *secs;
    size_t n;
    char *path;
};

void snap_image_free(snap_image *img)
{
    if (img == NULL) return;
    if (img->buf != NULL && img->buf != snap_empty) (void)munmap((void *)img->buf, img->size);
    free(img->secs);
    free(img->path);
    free(img);
}

/* Validate img->buf (img->size bytes) and fill last_seq and the sections.
 * Returns SMP_OK, SMP_EPROTO with the reason in err (prefixed with path), or
 * SMP_ENOMEM. Nothing is trusted before it has been checked. */
static int snap_parse(snap_image *img, const char *path, char *err, size_t errlen)
{
    const uint8_t *p = img->buf;
    size_t size = img->size;

    if (size < SNAP_HEADER_LEN + SNAP_TRAILER_LEN)
        return snap_fail(SMP_EPROTO, err, errlen,
                         "%s: truncated: %zu bytes is shorter than a header and a trailer",
                         path, size);
    if (memcmp(p, SNAP_MAGIC, 8) != 0)
        return snap_fail(SMP_EPROTO, err, errlen,
                         "%s: header: bad magic, not a snapshot file", path);
    if (snap_get64(p + 24) != XXH64(p, 24, 0))
        return snap_fail(SMP_EPROTO, err, errlen, "%s: header checksum mismatch", path);
    uint32_t version = snap_get32(p + 8);
    if (version != SNAP_FORMAT_VERSION)
        return snap_fail(SMP_EPROTO, err, errlen,
                         "%s: header: format version %" PRIu32
                         " is not supported (this build reads %u)",
                         path, version, SNAP_FORMAT_VERSION);
    uint32_t count = snap_get32(p + 12);
    size_t end = size - SNAP_TRAILER_LEN; /* where the trailer must start */
    if (count > SNAP_SECTIONS_MAX)
        return snap_fail(SMP_EPROTO, err, errlen,
                         "%s: header: %" PRIu32 " sections is more than the limit (%d)",
                         path, count, SNAP_SECTIONS_MAX);
    if ((uint64_t)count * SNAP_FRAME_LEN > end - SNAP_HEADER_LEN)
        return snap_fail(SMP_EPROTO, err, errlen,
                         "%s: header: %" PRIu32 " sections do not fit in %zu bytes"
                         " (truncated?)", path, count, size);
    img->last_seq = snap_get64(p + 16);
    if (count > 0) {
        img->secs = calloc(count, sizeof(*img->secs));
        if (img->secs == NULL)
            return snap_fail(SMP_ENOMEM, err, errlen, "%s: out of memory", path);
    }

    size_t pos = SNAP_HEADER_LEN;
    for (uint32_t i = 0; i < count; i++) {
        char shown[SNAP_NAME_MAX + 1];
        if (end - pos < SNAP_FRAME_LEN)
            return snap_fail(SMP_EPROTO, err, errlen,
                             "%s: section #%" PRIu32 " frame runs past the end of the file"
                             " (truncated?)", path, i);
        const uint8_t *fr = p + pos;
        size_t nl = snap_get16(fr);
        if (nl == 0 || nl > SNAP_NAME_MAX || end - pos - SNAP_FRAME_LEN < nl)
            return snap_fail(SMP_EPROTO, err, errlen,
                             "%s: section #%" PRIu32 " frame is damaged or truncated"
                             " (name length %zu)", path, i, nl);
        const uint8_t *name = fr + SNAP_FRAME_LEN;
        XXH64_state_t fst;
        (void)XXH64_reset(&fst, 0);
        (void)XXH64_update(&fst, fr, 24);
        (void)XXH64_update(&fst, name, nl);
        snap_name_for_message(name, nl, shown);
        if (snap_get64(fr + 24) != XXH64_digest(&fst))
            return snap_fail(SMP_EPROTO, err, errlen,
                             "%s: section #%" PRIu32 " frame checksum mismatch"
                             " (name reads '%s')", path, i, shown);
        if (!snap_name_valid_n((const char *)name, nl) || snap_get32(fr + 4) != 0)
            return snap_fail(SMP_EPROTO, err, errlen,
                             "%s: section #%" PRIu32 " ('%s') has an invalid name or"
                             " reserved field", path, i, shown);
        pos += SNAP_FRAME_LEN + nl;
        uint64_t blen = snap_get64(fr + 8);
        if (blen > end - pos)
            return snap_fail(SMP_EPROTO, err, errlen,
                             "%s: section '%s' length %" PRIu64 " runs past the end of"
                             " the file (truncated?)", path, shown, blen);
        if (snap_get64(fr + 16) != XXH64(p + pos, (size_t)blen, 0))
            return snap_fail(SMP_EPROTO, err, errlen,
                             "%s: section '%s' checksum mismatch", path, shown);
        snap_section *s = &img->secs[i];
        memcpy(s->name, name, nl);
        s->name[nl] = '\0';
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(img->secs[j].name, s->name) == 0)
                return snap_fail(SMP_EPROTO, err, errlen,
                                 "%s: section '%s' appears twice", path, shown);
        s->encver = snap_get16(fr + 2);
        s->data = p + pos;
        s->len = (size_t)blen;
        pos += (size_t)blen;
    }
    img->n = count;

    if (pos != end)
        return snap_fail(SMP_EPROTO, err, errlen,
                         "%s: %zu unexpected bytes between the last section and the trailer"
                         " (or the trailer is truncated)", path, end - pos);
    const uint8_t *tr = p + end;
    if (memcmp(tr, SNAP_TRAILER_MAGIC, 8) != 0)
        return snap_fail(SMP_EPROTO, err, errlen,
                         "%s: trailer: bad magic (truncated or damaged)", path);
    uint64_t flen = snap_get64(tr + 8);
    if (flen != size)
        return snap_fail(SMP_EPROTO, err, errlen,
                         "%s: trailer records %" PRIu64 " bytes but the file has %zu",
                         path, flen, size);
    if (snap_get64(tr + 16) != XXH64(p, size - 8, 0))
        return snap_fail(SMP_EPROTO, err, errlen,
                         "%s: trailer: whole-file checksum mismatch", path);
    return SMP_OK;
}

/* The file is brought in in pieces of this size, so that a section asked
 * for early (snap_early) can go out as soon as its bytes are in. */
#define SNAP_READ_CHUNK ((size_t)16 << 20)

size_t snap_feed_wait(snap_feed *f, size_t upto)
{
    pthread_mutex_lock(&f->mu);
    while (f->avail < upto && !f->ended) pthread_cond_wait(&f->cv, &f->mu);
    size_t n = f->avail;
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* Say that the first avail bytes of the streamed section are in (ended: and
 * no more will come), waking whoever waits. */
static void snap_feed_set(snap_feed *f, size_t avail, int ended)
{
    pthread_mutex_lock(&f->mu);
    f->avail = avail;
    if (ended) f->ended = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

void snap_early_fini(snap_early *e)
{
    if (e == NULL || e->s.feed == NULL) return;
    pthread_cond_destroy(&e->feed.cv);
    pthread_mutex_destroy(&e->feed.mu);
    e->s.feed = NULL;
}

/* The streamed section of e (handed out) after the first got bytes of the
 * file are in: its feed follows. */
static void snap_early_fed(snap_early *e, size_t got)
{
    size_t in = got - e->at < e->s.len ? got - e->at : e->s.len;
    snap_feed_set(&e->feed, in, in == e->s.len);
}

/* Hand out e's section from bytes not all in yet: s.feed says how many of
 * its len are (got - at). SMP_ENOMEM when its feed cannot be made. */
static int snap_early_stream(snap_early *e, size_t got)
{
    if (pthread_mutex_init(&e->feed.mu, NULL) != 0) return SMP_ENOMEM;
    if (pthread_cond_init(&e->feed.cv, NULL) != 0) {
        pthread_mutex_destroy(&e->feed.mu);
        return SMP_ENOMEM;
    }
    e->feed.avail = got - e->at;
    e->feed.ended = 0;
    e->s.feed = &e->feed;
    e->state = 1;
    e->fn(e->arg, &e->s);
    return SMP_OK;
}

/* Fill e->s from its frame fr (its name is e->name) and body data[0..len). */
static void snap_early_section(snap_early *e, const uint8_t *fr, const uint8_t *data, size_t len)
{
    size_t nl = strlen(e->name);
    memcpy(e->s.name, e->name, nl);
    e->s.name[nl] = '\0';
    e->s.encver = snap_get16(fr + 2);
    e->s.data = data;
    e->s.len = len;
}

/* Try to hand out e's section from the first got bytes of the file at p:
 * once the header, every frame up to the section's and the section's body
 * are in and each matches its checksum, e->fn gets it (e->state 1); with
 * e->stream, once the frames are in and match (the body's bytes follow on
 * s.feed). Bytes that do not check, or a file without the section, end the
 * attempt (state -1): the whole-file validation that follows names what is
 * wrong. Returns with state 0 when more bytes are needed. */
static void snap_early_try(snap_early *e, const uint8_t *p, size_t got)
{
    if (got < SNAP_HEADER_LEN) return;
    e->state = -1;
    if (memcmp(p, SNAP_MAGIC, 8) != 0 || snap_get64(p + 24) != XXH64(p, 24, 0)) return;
    uint32_t count = snap_get32(p + 12);
    size_t want = strlen(e->name);
    size_t pos = SNAP_HEADER_LEN;
    for (uint32_t i = 0; i < count && i < SNAP_SECTIONS_MAX; i++) {
        const uint8_t *fr = p + pos;
        size_t nl = got - pos >= SNAP_FRAME_LEN ? snap_get16(fr) : 0;
        if (got - pos < SNAP_FRAME_LEN || got - pos - SNAP_FRAME_LEN < nl) {
            e->state = 0; /* the frame is not all in yet */
            return;
        }
        if (nl == 0 || nl > SNAP_NAME_MAX) return;
        XXH64_state_t fst;
        (void)XXH64_reset(&fst, 0);
        (void)XXH64_update(&fst, fr, 24);
        (void)XXH64_update(&fst, fr + SNAP_FRAME_LEN, nl);
        if (snap_get64(fr + 24) != XXH64_digest(&fst)) return;
        pos += SNAP_FRAME_LEN + nl;
        uint64_t blen = snap_get64(fr + 8);
        int mine = nl == want && memcmp(fr + SNAP_FRAME_LEN, e->name, nl) == 0;
        if (mine && e->stream && blen > got - pos && blen <= SIZE_MAX) {
            /* the mapping holds the whole file: the bytes stay where they come */
            snap_early_section(e, fr, p + pos, (size_t)blen);
            e->at = pos;
            if (snap_early_stream(e, got) < 0) e->state = -1;
            return;
        }
        if (blen > got - pos) {
            e->state = 0; /* the body is not all in yet */
            return;
        }
        if (mine) {
            if (snap_get64(fr + 16) != XXH64(p + pos, (size_t)blen, 0)) return;
            snap_early_section(e, fr, blen ? p + pos : snap_empty, (size_t)blen);
            e->s.feed = NULL;
            e->state = 1;
            e->fn(e->arg, &e->s);
            return;
        }
        pos += (size_t)blen;
    }
}

/* Bring the len bytes of img's mapping at off (a multiple of the page
 * size) into memory: read from the file where the page cache lacks them and
 * mapped, so that using them later neither waits for the disk nor faults in
 * each page. A read that fails -- an I/O error, or bytes the file no longer
 * has -- is an error here rather than a SIGBUS where the bytes are used.
 * SMP_OK or SMP_EIO with err set. */
static int snap_populate(snap_image *img, int fd, size_t off, size_t len, char *err,
                         size_t errlen)
{
    for (;;) {
        if (madvise((void *)(img->buf + off), len, MADV_POPULATE_READ) == 0) return SMP_OK;
        int e = errno;
        if (e == EINTR || e == EAGAIN) continue;
        if (e == EINVAL) return SMP_OK; /* a kernel before 5.14: the pages come as used */
        struct stat sb;
        if (e == EFAULT && fstat(fd, &sb) == 0 && (uint64_t)sb.st_size < off + len)
            return snap_fail(SMP_EIO, err, errlen,
                             "%s: read failed: file shrank while being read (%zu bytes,"
                             " %jd now)", img->path, img->size, (intmax_t)sb.st_size);
        return snap_fail(SMP_EIO, err, errlen, "%s: read failed: %s", img->path,
                         e == EFAULT ? "I/O error" : strerror(e));
    }
}

/* Map the whole of path into a new image and validate it; when has_seq the
 * header's sequence must equal seq. See snap_load_file for the contract;
 * early (may be NULL) as snap_load_newest_early.
 *
 * The file is mapped, not read into a buffer: a snapshot of a large store
 * is hundreds of MB, which a read copies into as much fresh memory -- on a
 * virtual machine, where the first touch of a page is dear, most of a
 * restart's time. Snapshot files are written once and never changed in
 * place (snap_write_file), so the bytes stay put; a file cut short by
 * someone else while it is mapped is found by the populate that reads it. */
static int snap_load_path(const char *path, int has_seq, uint64_t seq,
                          snap_early *early, snap_image **out, char *err,
                          size_t errlen)
{
    int rc;
    struct stat sb;
    snap_image *img = NULL;

    *out = NULL;
    if (early != NULL) {
        early->state = 0;
        early->s.feed = NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return snap_fail(e == ENOENT ? SMP_ENOTFOUND : SMP_EIO, err, errlen,
                         "%s: cannot open: %s", path, strerror(e));
    }
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        rc = snap_fail(SMP_EIO, err, errlen, "%s: not a readable regular file", path);
        goto close_fd;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX - 1) {
        rc = snap_fail(SMP_ENOMEM, err, errlen, "%s: too large to load", path);
        goto close_fd;
    }
    img = calloc(1, sizeof(*img));
    if (img == NULL || (img->path = strdup(path)) == NULL) {
        rc = snap_fail(SMP_ENOMEM, err, errlen, "%s: out of memory", path);
        goto free_image;
    }
    img->size = (size_t)sb.st_size;
    img->buf = snap_empty;
    if (img->size > 0) {
        void *map = mmap(NULL, img->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            rc = snap_fail(errno == ENOMEM ? SMP_ENOMEM : SMP_EIO, err, errlen,
                           "%s: cannot map %zu bytes: %s", path, img->size, strerror(errno));
            goto free_image;
        }
        img->buf = map;
    }
    for (size_t got = 0; got < img->size;) {
        size_t ask = img->size - got;
        int piecemeal = early != NULL && (early->state == 0 ||
                                          (early->s.feed != NULL && !early->feed.ended));
        if (piecemeal && ask > SNAP_READ_CHUNK) ask = SNAP_READ_CHUNK;
        if ((rc = snap_populate(img, fd, got, ask, err, errlen)) < 0) goto free_image;
        got += ask;
        if (early != NULL && early->state == 0)
            snap_early_try(early, img->buf, got);
        else if (early != NULL && early->s.feed != NULL)
            snap_early_fed(early, got);
    }
    if ((rc = snap_parse(img, path, err, errlen)) < 0) goto free_image;
    if (has_seq && img->last_seq != seq) {
        rc = snap_fail(SMP_EPROTO, err, errlen,
                       "%s: header sequence %" PRIu64 " does not match the file name",
                       path, img->last_seq);
        goto free_image;
    }
    *out = img;
    img = NULL;
    rc = SMP_OK;

free_image:
    if (img != NULL && early != NULL && early->state == 1) {
        /* a streamed section's loader stops waiting for bytes */
        if (early->s.feed != NULL) snap_feed_set(&early->feed, early->feed.avail, 1);
        early->fn(early->arg, NULL); /* done with the bytes before they go */
    }
    snap_image_free(img);
close_fd:
    close(fd);
    return rc;
}

int snap_load_file(const char *path, snap_image **out, char *err, size_t errlen)
{
    uint64_t seq = 0;
    if (out == NULL) return SMP_EINVAL;
    *out = NULL;
    if (path == NULL) return SMP_EINVAL;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int has_seq = snap_parse_name(base, SNAP_SUFFIX, &seq);
    return snap_load_path(path, has_seq, seq, NULL, out, err, errlen);
}

int snap_load_newest(const char *dir, snap_image **out, char *err, size_t errlen)
{
    return snap_load_newest_early(dir, NULL, out, err, errlen);
}

int snap_newest_two(const char *dir, uint64_t *newest, uint64_t *older)
{
    snap_list l;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return SMP_EIO;
    int rc = snap_scan(dfd, 0, &l);
    close(dfd);
    if (rc < 0) return rc;
    *newest = *older = 0;
    if (l.n > 0) {
        qsort(l.seqs, l.n, sizeof(*l.seqs), snap_seq_desc);
        *newest = l.seqs[0];
        if (l.n > 1) *older = l.seqs[1];
    }
    free(l.seqs);
    return l.n > 0 ? SMP_OK : SMP_ENOTFOUND;
}

int snap_load_newest_early(const char *dir, snap_early *early, snap_image **out, char *err,
                           size_t errlen)
{
    int rc;
    snap_list l;
    char *path = NULL;

    if (early != NULL) early->state = 0;
    if (out == NULL) return SMP_EINVAL;
    *out = NULL;
    if (dir == NULL) return SMP_EINVAL;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return snap_fail(SMP_EIO, err, errlen, "%s: cannot open snapshot directory: %s",
                         dir, strerror(errno));
    /* Remove a crashed write's .tmp only if no writer is at work right now. */
    int locked = flock(dfd, LOCK_EX | LOCK_NB) == 0;
    rc = snap_scan(dfd, locked, &l);
    if (locked) (void)flock(dfd, LOCK_UN);
    if (rc < 0) {
        rc = snap_fail(rc, err, errlen, "%s: cannot list the snapshot directory", dir);
        goto close_dir;
    }
    if (l.n == 0) {
        rc = snap_fail(SMP_ENOTFOUND, err, errlen, "%s: no snapshot", dir);
        goto free_list;
    }
    uint64_t newest = l.seqs[0];
    for (size_t i = 1; i < l.n; i++)
        if (l.seqs[i] > newest) newest = l.seqs[i];
    char name[SNAP_FILE_NAME_MAX];
    snap_format_name(name, newest, SNAP_SUFFIX);
    size_t plen = strlen(dir) + 1 + strlen(name) + 1;
    if ((path = malloc(plen)) == NULL) {
        rc = snap_fail(SMP_ENOMEM, err, errlen, "%s: out of memory", dir);
        goto free_list;
    }
    snprintf(path, plen, "%s/%s", dir, name);
    rc = snap_load_path(path, 1, newest, early, out, err, errlen);
    /* A newest snapshot that vanished between listing and opening is a
     * damaged directory, not an empty one. */
    if (rc == SMP_ENOTFOUND) rc = SMP_EIO;
    free(path);

free_list:
    free(l.seqs);
close_dir:
    close(dfd);
    return rc;
}

uint64_t snap_image_last_seq(const snap_image *img)
{
    return img->last_seq;
}

const char *snap_image_path(const snap_image *img)
{
    return img->path;
}

size_t snap_image_count(const snap_image *img)
{
    return img->n;
}

const snap_section *snap_image_section_at(const snap_image *img, size_t i)
{
    return (img != NULL && i < img->n) ? &img->secs[i] : NULL;
}

const snap_section *snap_image_section(const snap_image *img, const char *name)
{
    if (img == NULL || name == NULL) return NULL;
    for (size_t i = 0; i < img->n; i++)
        if (strcmp(img->secs[i].name, name) == 0) return &img->secs[i];
    return NULL;
}

void snap_reader_init(smp_reader *r, const snap_section *s)
{
    r->data = (s != NULL && s->len > 0) ? s->data : snap_empty;
    r->len = s != NULL ? s->len : 0;
}

void snap_reader_data(smp_reader *r, const uint8_t **data, size_t *len)
{
    *data = (r != NULL && r->data != NULL) ? r->data : snap_empty;
    *len = r != NULL ? r->len : 0;
}
