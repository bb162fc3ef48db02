/* node_cold.c -- persist, load, delete and inventory cold replica files.
 *
 * All file operations go through the directory's descriptor (openat,
 * renameat, unlinkat), so a name is always resolved inside the tier and never
 * re-interpreted as a path. Persist streams the source in chunks: write the
 * chunk and start its writeback (sync_file_range, a hint) while a reader
 * thread follows through a second descriptor, reading back every finished
 * chunk and hashing what it read. The device, the writer and the hashing
 * work at the same time, so the cost over a plain write + fdatasync is
 * small. Loads hash while they read, into the caller's
 * buffer, with no staging copy. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <xxhash.h>

#include "node_cold.h"
#include "wm_errbuf.h"

#define COLD_CHUNK (4u << 20)          /* bytes per write / read-back step */
#define COLD_MAGIC "WMCOLD\0\1"
#define COLD_TMP_NAME_MAX (COLD_NAME_MAX + 32)

struct cold_tier {
    char *dir;
    int dfd;
    _Atomic uint64_t fail_no_space; /* persist items that failed ENOSPC / EDQUOT */
    _Atomic uint64_t fail_other;    /* ... otherwise (bad arguments not counted) */
};

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

static void hex_encode(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

/* 1 when name is exactly 64 lowercase hex digits followed by suffix. */
static int is_hex_name(const char *name, const char *suffix)
{
    size_t i;
    for (i = 0; i < 64; i++) {
        char c = name[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return strcmp(name + 64, suffix) == 0;
}

/* 1 when name looks like one of our temporary files: <64 hex>.cold.<16 hex>.tmp */
static int is_tmp_name(const char *name)
{
    size_t n = strlen(name);
    if (n != 64 + 5 + 1 + 16 + 4 || strncmp(name + 64, COLD_SUFFIX ".", 6) != 0)
        return 0;
    return strcmp(name + n - 4, COLD_TMP_SUFFIX) == 0;
}

int cold_open(const char *dir, cold_tier **out, char *err, size_t errlen)
{
    cold_tier *ct;
    if (dir == NULL || dir[0] == '\0' || out == NULL) {
        wm_errbuf(err, errlen, "cold: no directory given");
        return SMP_EINVAL;
    }
    *out = NULL;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        wm_errbuf(err, errlen, "%s: cannot create the cold directory: %s", dir, strerror(errno));
        return SMP_EIO;
    }
    ct = calloc(1, sizeof(*ct));
    if (ct == NULL)
        return SMP_ENOMEM;
    ct->dir = strdup(dir);
    if (ct->dir == NULL) {
        free(ct);
        return SMP_ENOMEM;
    }
    ct->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (ct->dfd < 0) {
        wm_errbuf(err, errlen, "%s: cannot open the cold directory: %s", dir, strerror(errno));
        free(ct->dir);
        free(ct);
        return SMP_EIO;
    }
    *out = ct;
    return SMP_OK;
}

void cold_close(cold_tier *ct)
{
    if (ct == NULL)
        return;
    close(ct->dfd);
    free(ct->dir);
    free(ct);
}

const char *cold_dir(const cold_tier *ct) { return ct->dir; }

void cold_usage_get(cold_tier *ct, cold_usage *out)
{
    struct statvfs sv;
    memset(out, 0, sizeof(*out));
    out->write_failures_no_space = atomic_load(&ct->fail_no_space);
    out->write_failures_other = atomic_load(&ct->fail_other);
    /* the directory the node writes into (its descriptor), not whatever the
       path names now */
    if (fstatvfs(ct->dfd, &sv) < 0) {
        out->error = errno;
        return;
    }
    uint64_t unit = sv.f_frsize ? (uint64_t)sv.f_frsize : (uint64_t)sv.f_bsize;
    out->total_bytes = (uint64_t)sv.f_blocks * unit;
    out->free_bytes = (uint64_t)sv.f_bavail * unit;
    out->used_bytes = sv.f_blocks >= sv.f_bfree ? (uint64_t)(sv.f_blocks - sv.f_bfree) * unit : 0;
}

/* 1 when key is usable: 1..COLD_KEY_MAX bytes. */
static int key_ok(const char *key)
{
    size_t n;
    if (key == NULL)
        return 0;
    n = strnlen(key, COLD_KEY_MAX + 1);
    return n >= 1 && n <= COLD_KEY_MAX;
}

int cold_name_for(const char *key, const uint8_t sha256[32], char out[COLD_NAME_MAX])
{
    int rc = SMP_ENOMEM;
    uint8_t md[32];
    EVP_MD_CTX *ctx;
    if (!key_ok(key) || sha256 == NULL || out == NULL)
        return SMP_EINVAL;
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL)
        return SMP_ENOMEM;
    if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
        EVP_DigestUpdate(ctx, key, strlen(key) + 1) && /* with its NUL */
        EVP_DigestUpdate(ctx, sha256, 32) &&
        EVP_DigestFinal_ex(ctx, md, NULL)) {
        hex_encode(md, 32, out);
        strcpy(out + 64, COLD_SUFFIX);
        rc = SMP_OK;
    }
    EVP_MD_CTX_free(ctx);
    return rc;
}

int cold_resolve(const cold_tier *ct, const char *name_or_path, char name_out[COLD_NAME_MAX])
{
    const char *base = name_or_path;
    const char *slash;
    if (ct == NULL || name_or_path == NULL || name_out == NULL)
        return SMP_EINVAL;
    slash = strrchr(name_or_path, '/');
    if (slash != NULL) {
        size_t dl = strlen(ct->dir);
        while (dl > 1 && ct->dir[dl - 1] == '/')
            dl--;
        if ((size_t)(slash - name_or_path) != dl || strncmp(name_or_path, ct->dir, dl) != 0)
            return SMP_EINVAL;
        base = slash + 1;
    }
    if (strlen(base) != 64 + strlen(COLD_SUFFIX) || !is_hex_name(base, COLD_SUFFIX))
        return SMP_EINVAL;
    memcpy(name_out, base, 64 + strlen(COLD_SUFFIX) + 1);
    return SMP_OK;
}

int cold_path_for(const cold_tier *ct, const char *name, char *buf, size_t cap)
{
    char bare[COLD_NAME_MAX];
    int n;
    if (cold_resolve(ct, name, bare) < 0)
        return SMP_EINVAL;
    n = snprintf(buf, cap, "%s/%s", ct->dir, bare);
    return n < 0 || (size_t)n >= cap ? SMP_ERANGE : SMP_OK;
}

/* Write all of buf at off. Returns SMP_OK, SMP_ENOSPC or SMP_EIO. */
static int pwrite_all(int fd, const uint8_t *buf, size_t len, uint64_t off)
{
    while (len > 0) {
        ssize_t n = pwrite(fd, buf, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == ENOSPC || errno == EDQUOT ? SMP_ENOSPC : SMP_EIO;
        }
        buf += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return SMP_OK;
}

/* Read exactly len bytes at off. SMP_OK, SMP_EPROTO (the file ends first),
 * SMP_EIO. */
static int pread_all(int fd, uint8_t *buf, size_t len, uint64_t off)
{
    while (len > 0) {
        ssize_t n = pread(fd, buf, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return SMP_EIO;
        }
        if (n == 0)
            return SMP_EPROTO;
        buf += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return SMP_OK;
}

/* Build the header of a file holding len bytes of key with checksum sha. */
static void encode_header(uint8_t hdr[COLD_HEADER_BYTES], const char *key, uint64_t len,
                          const uint8_t sha[32])
{
    size_t klen = strlen(key);
    memset(hdr, 0, COLD_HEADER_BYTES);
    memcpy(hdr, COLD_MAGIC, 8);
    put_u32(hdr + 8, COLD_FORMAT_VERSION);
    put_u32(hdr + 12, COLD_HEADER_BYTES);
    put_u64(hdr + 16, len);
    memcpy(hdr + 24, sha, 32);
    put_u16(hdr + 56, (uint16_t)klen);
    memcpy(hdr + 58, key, klen);
    put_u64(hdr + COLD_HEADER_BYTES - 8, XXH64(hdr, COLD_HEADER_BYTES - 8, 0));
}

/* Check a header; on SMP_OK fill the length, checksum and key (key_buf:
 * COLD_KEY_MAX + 1 bytes). SMP_EPROTO for anything malformed. */
static int decode_header(const uint8_t hdr[COLD_HEADER_BYTES], uint64_t *len, uint8_t sha[32],
                         char *key_buf)
{
    uint16_t klen;
    if (memcmp(hdr, COLD_MAGIC, 8) != 0 || get_u32(hdr + 8) != COLD_FORMAT_VERSION ||
        get_u32(hdr + 12) != COLD_HEADER_BYTES ||
        get_u64(hdr + COLD_HEADER_BYTES - 8) != XXH64(hdr, COLD_HEADER_BYTES - 8, 0))
        return SMP_EPROTO;
    klen = get_u16(hdr + 56);
    if (klen == 0 || klen > COLD_KEY_MAX || memchr(hdr + 58, '\0', klen) != NULL)
        return SMP_EPROTO;
    *len = get_u64(hdr + 16);
    if (*len > (uint64_t)INT64_MAX - COLD_HEADER_BYTES)
        return SMP_EPROTO;
    memcpy(sha, hdr + 24, 32);
    memcpy(key_buf, hdr + 58, klen);
    key_buf[klen] = '\0';
    return SMP_OK;
}

/* Hash len data bytes of fd (after the header) into md, through a bounce
 * buffer. SMP_OK, SMP_EPROTO (short file), SMP_EIO, SMP_ENOMEM. */
static int hash_file_data(int fd, uint64_t len, uint8_t md[32])
{
    int rc = SMP_OK;
    uint64_t done = 0;
    uint8_t *buf;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL)
        return SMP_ENOMEM;
    size_t cap = len < COLD_CHUNK ? (size_t)len : COLD_CHUNK; /* as readback_main's */
    buf = malloc(cap ? cap : 1);
    if (buf == NULL) {
        rc = SMP_ENOMEM;
        goto free_ctx;
    }
    if (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        rc = SMP_ENOMEM;
        goto free_buf;
    }
    while (done < len) {
        size_t n = len - done < cap ? (size_t)(len - done) : cap;
        if ((rc = pread_all(fd, buf, n, COLD_HEADER_BYTES + done)) < 0)
            goto free_buf;
        EVP_DigestUpdate(ctx, buf, n);
        done += n;
    }
    if (!EVP_DigestFinal_ex(ctx, md, NULL))
        rc = SMP_ENOMEM;
free_buf:
    free(buf);
free_ctx:
    EVP_MD_CTX_free(ctx);
    return rc;
}

/* The read-back half of a persist, on its own thread: it follows the writer
 * through the file, reading back every byte the writer has finished
 * (through its own descriptor) and hashing what it read. The writer only
 * publishes how far it got; hashing (the CPU cost of a persist) thus runs
 * beside the writes and the device's writeback instead of after them. */
typedef struct readback {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int rfd;
    uint64_t len;       /* data bytes to expect */
    uint64_t written;   /* data bytes the writer has finished (under mu) */
    int stop;           /* the writer gave up (under mu) */
    int rc;             /* the reader's result */
    uint8_t md[32];
} readback;

static void *readback_main(void *arg)
{
    readback *r = arg;
    uint64_t done = 0;
    /* no more than the object: a small one (a manifest) needs no 4 MiB
     * buffer, a fresh mapping per persist where malloc maps large blocks */
    size_t cap = r->len < COLD_CHUNK ? (size_t)r->len : COLD_CHUNK;
    uint8_t *buf = malloc(cap ? cap : 1);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    r->rc = SMP_OK;
    if (buf == NULL || ctx == NULL || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        r->rc = SMP_ENOMEM;
        goto free_all;
    }
    while (done < r->len) {
        uint64_t avail;
        size_t n;
        pthread_mutex_lock(&r->mu);
        while (r->written <= done && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        avail = r->written - done;
        if (r->stop)
            avail = 0;
        pthread_mutex_unlock(&r->mu);
        if (avail == 0) {
            r->rc = SMP_ECANCELED;
            goto free_all;
        }
        n = avail < cap ? (size_t)avail : cap;
        if ((r->rc = pread_all(r->rfd, buf, n, COLD_HEADER_BYTES + done)) < 0)
            goto free_all;
        EVP_DigestUpdate(ctx, buf, n);
        done += n;
    }
    if (!EVP_DigestFinal_ex(ctx, r->md, NULL))
        r->rc = SMP_ENOMEM;
free_all:
    EVP_MD_CTX_free(ctx);
    free(buf);
    return NULL;
}

/* Tell the reader how far the writer got (stop: the writer gave up). */
static void readback_publish(readback *r, uint64_t written, int stop)
{
    pthread_mutex_lock(&r->mu);
    r->written = written;
    r->stop |= stop;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Write header and data to fd while a reader thread reads every finished
 * chunk back through rfd and hashes it into md. Returns SMP_OK once both
 * are done; otherwise the writer's or the reader's error (SMP_ENOSPC,
 * SMP_EIO, SMP_EPROTO, SMP_ENOMEM). No thread outlives the call. */
static int write_and_read_back(int fd, int rfd, const char *key, const uint8_t *data,
                               uint64_t len, const uint8_t sha[32], uint8_t md[32])
{
    int rc;
    uint64_t done = 0;
    uint8_t hdr[COLD_HEADER_BYTES];
    readback r;

    encode_header(hdr, key, len, sha);
    if ((rc = pwrite_all(fd, hdr, COLD_HEADER_BYTES, 0)) < 0)
        return rc;
    memset(&r, 0, sizeof(r));
    r.rfd = rfd;
    r.len = len;
    if (pthread_mutex_init(&r.mu, NULL) != 0)
        return SMP_ENOMEM;
    if (pthread_cond_init(&r.cv, NULL) != 0) {
        rc = SMP_ENOMEM;
        goto destroy_mutex;
    }
    if (pthread_create(&r.th, NULL, readback_main, &r) != 0) {
        rc = SMP_ENOMEM;
        goto destroy_cond;
    }
    while (done < len) {
        size_t n = len - done < COLD_CHUNK ? (size_t)(len - done) : COLD_CHUNK;
        uint64_t off = COLD_HEADER_BYTES + done;
        if ((rc = pwrite_all(fd, data + done, n, off)) < 0)
            break;
        /* start writing this chunk to the device now; a hint, errors are
           caught by the fsync that follows */
        (void)sync_file_range(fd, (off_t)off, (off_t)n, SYNC_FILE_RANGE_WRITE);
        done += n;
        readback_publish(&r, done, 0);
    }
    if (rc < 0)
        readback_publish(&r, done, 1);
    pthread_join(r.th, NULL);
    if (rc == SMP_OK)
        rc = r.rc;
    if (rc == SMP_OK)
        memcpy(md, r.md, 32);
destroy_cond:
    pthread_cond_destroy(&r.cv);
destroy_mutex:
    pthread_mutex_destroy(&r.mu);
    return rc;
}

/* A batch item's state between the steps of cold_persist_batch. */
typedef struct persist_slot {
    cold_item *it;
    int fd, rfd;
    int existed;                   /* a final file of that name was there */
    int renamed;
    char tmp[COLD_TMP_NAME_MAX];
    uint8_t md[32];
} persist_slot;

#define COLD_SYNC_THREADS 4 /* fsyncs of a batch at once */

typedef struct sync_work {
    persist_slot *slots;
    size_t n;
    _Atomic size_t next;
    const char *dir;
} sync_work;

/* Fsync the batch's files from the shared cursor until none is left. */
static void *sync_main(void *arg)
{
    sync_work *w = arg;
    for (size_t i; (i = atomic_fetch_add(&w->next, 1)) < w->n;) {
        persist_slot *sl = &w->slots[i];
        if (sl->it->rc != SMP_OK || fsync(sl->fd) == 0)
            continue;
        sl->it->rc = errno == ENOSPC || errno == EDQUOT ? SMP_ENOSPC : SMP_EIO;
        wm_errbuf(sl->it->err, sizeof(sl->it->err), "%s/%s: fsync: %s", w->dir, sl->tmp,
                  strerror(errno));
    }
    return NULL;
}

/* Step 1 of a persist: create the temporary file, write header and data
 * while reading them back (write_and_read_back). Sets it->rc on failure. */
static void persist_write(cold_tier *ct, persist_slot *sl)
{
    cold_item *it = sl->it;
    uint8_t rnd[8];
    char rhex[17];
    int rc;
    sl->fd = sl->rfd = -1;
    if (!key_ok(it->key) || it->sha256 == NULL || (it->data == NULL && it->len > 0) ||
        it->len > (uint64_t)INT64_MAX - COLD_HEADER_BYTES) {
        wm_errbuf(it->err, sizeof(it->err), "cold persist: bad arguments");
        it->rc = SMP_EINVAL;
        return;
    }
    if ((it->rc = cold_name_for(it->key, it->sha256, it->name)) < 0) {
        wm_errbuf(it->err, sizeof(it->err), "cold persist: no file name for key %.200s: %s", it->key,
                  smp_strerror(it->rc));
        return;
    }
    if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
        wm_errbuf(it->err, sizeof(it->err), "cold persist: no random bytes for a temporary name");
        it->rc = SMP_EIO;
        return;
    }
    hex_encode(rnd, sizeof(rnd), rhex);
    snprintf(sl->tmp, sizeof(sl->tmp), "%s.%s%s", it->name, rhex, COLD_TMP_SUFFIX);
    sl->fd = openat(ct->dfd, sl->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (sl->fd < 0) {
        wm_errbuf(it->err, sizeof(it->err), "%s/%s: cannot create: %s", ct->dir, sl->tmp, strerror(errno));
        it->rc = errno == ENOSPC || errno == EDQUOT ? SMP_ENOSPC : SMP_EIO;
        return;
    }
    sl->rfd = openat(ct->dfd, sl->tmp, O_RDONLY | O_CLOEXEC);
    if (sl->rfd < 0) {
        wm_errbuf(it->err, sizeof(it->err), "%s/%s: cannot reopen to read back: %s", ct->dir, sl->tmp,
                  strerror(errno));
        it->rc = SMP_EIO;
        return;
    }
    rc = write_and_read_back(sl->fd, sl->rfd, it->key, it->data, it->len, it->sha256, sl->md);
    if (rc < 0) {
        wm_errbuf(it->err, sizeof(it->err), "%s/%s: writing %" PRIu64 " bytes failed: %s", ct->dir,
                  sl->tmp, it->len, smp_strerror(rc));
        it->rc = rc;
    }
}

/* Step 3, after the fsync: the bytes read back match, and (flag) so do
 * those re-read from the device. Sets it->rc on failure. */
static void persist_verify(cold_tier *ct, persist_slot *sl, unsigned flags)
{
    cold_item *it = sl->it;
    int rc;
    if (memcmp(sl->md, it->sha256, 32) != 0) {
        wm_errbuf(it->err, sizeof(it->err), "%s/%s: the bytes read back do not match the expected "
                  "SHA-256 (the source replica of %.200s or the disk is bad)", ct->dir, sl->tmp, it->key);
        it->rc = SMP_EPROTO;
        return;
    }
    if (flags & COLD_VERIFY_FROM_DISK) {
        (void)posix_fadvise(sl->rfd, 0, 0, POSIX_FADV_DONTNEED);
        if ((rc = hash_file_data(sl->rfd, it->len, sl->md)) < 0 || memcmp(sl->md, it->sha256, 32) != 0) {
            wm_errbuf(it->err, sizeof(it->err), "%s/%s: the bytes re-read from the device do not verify",
                      ct->dir, sl->tmp);
            it->rc = rc < 0 ? rc : SMP_EPROTO;
        }
    }
}

int cold_persist_batch(cold_tier *ct, cold_item *items, size_t n, unsigned flags)
{
    persist_slot slots[COLD_BATCH_MAX];
    pthread_t th[COLD_SYNC_THREADS];
    size_t n_th = 0;
    int rc = SMP_OK;
    if (ct == NULL || items == NULL || n == 0 || n > COLD_BATCH_MAX)
        return SMP_EINVAL;
    for (size_t i = 0; i < n; i++) {
        memset(&slots[i], 0, sizeof(slots[i]));
        slots[i].it = &items[i];
        items[i].rc = SMP_OK;
        items[i].err[0] = '\0';
        persist_write(ct, &slots[i]);
    }
    /* the fsyncs, a few at once: the device flushes them together */
    sync_work w = {.slots = slots, .n = n, .dir = ct->dir};
    atomic_init(&w.next, 0);
    while (n > 1 && n_th < COLD_SYNC_THREADS && n_th + 1 < n &&
           pthread_create(&th[n_th], NULL, sync_main, &w) == 0)
        n_th++;
    sync_main(&w);
    for (size_t i = 0; i < n_th; i++)
        pthread_join(th[i], NULL);
    for (size_t i = 0; i < n; i++) {
        persist_slot *sl = &slots[i];
        if (sl->it->rc == SMP_OK)
            persist_verify(ct, sl, flags);
        if (sl->it->rc != SMP_OK)
            continue;
        /* an identical, verified file may already be there (persisting the
           same content twice): it is replaced by an identical one, and must
           not be taken away below if the directory sync fails */
        sl->existed = faccessat(ct->dfd, sl->it->name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
        if (renameat(ct->dfd, sl->tmp, ct->dfd, sl->it->name) < 0) {
            wm_errbuf(sl->it->err, sizeof(sl->it->err), "%s/%s: rename: %s", ct->dir, sl->it->name,
                      strerror(errno));
            sl->it->rc = SMP_EIO;
            continue;
        }
        sl->renamed = 1;
    }
    int any_renamed = 0;
    for (size_t i = 0; i < n; i++)
        any_renamed |= slots[i].renamed;
    if (any_renamed && fsync(ct->dfd) < 0) { /* once, for every rename of the batch */
        /* the renames may not be durable: take the new final files back */
        int e = errno;
        for (size_t i = 0; i < n; i++) {
            persist_slot *sl = &slots[i];
            if (!sl->renamed)
                continue;
            wm_errbuf(sl->it->err, sizeof(sl->it->err), "%s: fsync of the directory: %s", ct->dir,
                      strerror(e));
            sl->it->rc = SMP_EIO;
            if (!sl->existed)
                unlinkat(ct->dfd, sl->it->name, 0);
        }
        (void)fsync(ct->dfd);
    }
    for (size_t i = 0; i < n; i++) {
        persist_slot *sl = &slots[i];
        if (sl->rfd >= 0)
            close(sl->rfd);
        if (sl->fd >= 0)
            close(sl->fd);
        if (sl->it->rc != SMP_OK && !sl->renamed && sl->fd >= 0)
            unlinkat(ct->dfd, sl->tmp, 0);
        if (sl->it->rc == SMP_ENOSPC)
            atomic_fetch_add(&ct->fail_no_space, 1);
        else if (sl->it->rc != SMP_OK && sl->it->rc != SMP_EINVAL)
            atomic_fetch_add(&ct->fail_other, 1);
        if (sl->it->rc != SMP_OK && rc == SMP_OK)
            rc = sl->it->rc;
    }
    return rc;
}

int cold_persist(cold_tier *ct,
                 const char *key,
                 const void *data,
                 uint64_t len,
                 const uint8_t sha256[32],
                 unsigned flags,
                 char name_out[COLD_NAME_MAX],
                 char *err,
                 size_t errlen)
{
    cold_item it = {.key = key, .data = data, .len = len, .sha256 = sha256};
    if (ct == NULL) {
        wm_errbuf(err, errlen, "cold persist: bad arguments");
        return SMP_EINVAL;
    }
    int rc = cold_persist_batch(ct, &it, 1, flags);
    if (rc == SMP_OK && name_out != NULL)
        memcpy(name_out, it.name, COLD_NAME_MAX);
    if (rc < 0)
        wm_errbuf(err, errlen, "%s", it.err);
    return rc;
}

/* Open a cold file by name and check its header and size. On SMP_OK *fd_out
 * is open and *len, sha, key_buf describe it; on SMP_EPROTO *fd_out is -1 and
 * *file_bytes is still set. */
static int open_checked(const cold_tier *ct, const char *name, int *fd_out, uint64_t *len,
                        uint8_t sha[32], char *key_buf, uint64_t *file_bytes)
{
    int rc;
    struct stat st;
    uint8_t hdr[COLD_HEADER_BYTES];
    /* O_NONBLOCK: a FIFO (or device) under a cold name must not hold the
     * thread in its open; it is refused below as not a regular file. */
    int fd = openat(ct->dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    *fd_out = -1;
    *file_bytes = 0;
    if (fd < 0)
        return errno == ENOENT ? SMP_ENOTFOUND : SMP_EIO;
    if (fstat(fd, &st) < 0) {
        rc = SMP_EIO;
        goto close_fd;
    }
    if (!S_ISREG(st.st_mode) || fcntl(fd, F_SETFL, 0) < 0) { /* a file: blocking again */
        rc = S_ISREG(st.st_mode) ? SMP_EIO : SMP_EPROTO;
        goto close_fd;
    }
    *file_bytes = (uint64_t)st.st_size;
    if ((rc = pread_all(fd, hdr, COLD_HEADER_BYTES, 0)) < 0)
        goto close_fd;
    if ((rc = decode_header(hdr, len, sha, key_buf)) < 0)
        goto close_fd;
    if (*file_bytes != COLD_HEADER_BYTES + *len) {
        rc = SMP_EPROTO;
        goto close_fd;
    }
    *fd_out = fd;
    return SMP_OK;
close_fd:
    close(fd);
    return rc;
}

int cold_check(const cold_tier *ct,
               const char *name_or_path,
               int deep,
               cold_entry *e,
               char *key_buf,
               char *name_buf)
{
    int rc, fd;
    uint8_t md[32];
    if (e == NULL || key_buf == NULL || name_buf == NULL)
        return SMP_EINVAL;
    memset(e, 0, sizeof(*e));
    if (cold_resolve(ct, name_or_path, name_buf) < 0)
        return SMP_EINVAL;
    e->name = name_buf;
    rc = open_checked(ct, name_buf, &fd, &e->length, e->sha256, key_buf, &e->file_bytes);
    if (rc == SMP_OK && deep) {
        rc = hash_file_data(fd, e->length, md);
        if (rc == SMP_OK && memcmp(md, e->sha256, 32) != 0)
            rc = SMP_EPROTO; /* the data is not what the header says it is */
        close(fd);
    } else if (rc == SMP_OK) {
        close(fd);
    }
    e->status = rc;
    if (rc < 0)
        return rc;
    e->key = key_buf;
    return SMP_OK;
}

int cold_stat(const cold_tier *ct,
              const char *name_or_path,
              cold_entry *e,
              char *key_buf,
              char *name_buf)
{
    return cold_check(ct, name_or_path, 0, e, key_buf, name_buf);
}

/* Open the cold file name_or_path that should hold len bytes of key (NULL:
 * any key) whose SHA-256 is sha256 (NULL: any), for what (the caller's
 * verb, for err): resolve the name, check the header and size, then that
 * key, length and recorded SHA-256 are the ones expected. On SMP_OK *fd_out
 * is open (the caller closes it), name holds the file's bare name and fsha
 * the header's SHA-256 (that is sha256 when given). Errors as cold_load's,
 * err naming the file. */
static int open_expected(const cold_tier *ct, const char *name_or_path, const char *key, uint64_t len,
                         const uint8_t sha256[32], const char *what, int *fd_out, uint8_t fsha[32],
                         char name[COLD_NAME_MAX], char *err, size_t errlen)
{
    int rc, fd;
    uint64_t flen, fbytes;
    char *fkey;
    *fd_out = -1;
    if (cold_resolve(ct, name_or_path, name) < 0) {
        wm_errbuf(err, errlen, "cold %s: \"%.200s\" is not a cold file of %s", what,
                name_or_path != NULL ? name_or_path : "", ct != NULL ? ct->dir : "?");
        return SMP_EINVAL;
    }
    fkey = malloc(COLD_KEY_MAX + 1);
    if (fkey == NULL)
        return SMP_ENOMEM;
    rc = open_checked(ct, name, &fd, &flen, fsha, fkey, &fbytes);
    if (rc < 0) {
        wm_errbuf(err, errlen, "%s/%s: %s", ct->dir, name,
                rc == SMP_EPROTO ? "bad header or size (corrupted cold file)" : smp_strerror(rc));
        goto free_key;
    }
    if (key != NULL && strcmp(key, fkey) != 0) {
        wm_errbuf(err, errlen, "%s/%s: holds key %.200s, not %.200s", ct->dir, name, fkey, key);
        rc = SMP_EINVAL;
    } else if (flen != len) {
        wm_errbuf(err, errlen, "%s/%s: holds %" PRIu64 " bytes, %" PRIu64 " expected", ct->dir,
                name, flen, len);
        rc = SMP_ERANGE;
    } else if (sha256 != NULL && memcmp(sha256, fsha, 32) != 0) {
        wm_errbuf(err, errlen, "%s/%s: recorded SHA-256 differs from the expected one", ct->dir, name);
        rc = SMP_EPROTO;
    }
    if (rc < 0)
        close(fd);
    else
        *fd_out = fd;
free_key:
    free(fkey);
    return rc;
}

int cold_load(const cold_tier *ct,
              const char *name_or_path,
              const char *key,
              void *dst,
              uint64_t len,
              const uint8_t sha256[32],
              char *err,
              size_t errlen)
{
    int rc, fd;
    uint64_t done = 0;
    uint8_t fsha[32], md[32];
    char name[COLD_NAME_MAX];
    EVP_MD_CTX *ctx;

    if (dst == NULL && len > 0) {
        wm_errbuf(err, errlen, "cold load: nowhere to load to");
        return SMP_EINVAL;
    }
    if ((rc = open_expected(ct, name_or_path, key, len, sha256, "load", &fd, fsha, name, err, errlen)) < 0)
        return rc;
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        rc = SMP_ENOMEM;
        goto free_ctx;
    }
    while (done < len) {
        size_t n = len - done < COLD_CHUNK ? (size_t)(len - done) : COLD_CHUNK;
        if ((rc = pread_all(fd, (uint8_t *)dst + done, n, COLD_HEADER_BYTES + done)) < 0) {
            wm_errbuf(err, errlen, "%s/%s: read: %s", ct->dir, name, smp_strerror(rc));
            goto free_ctx;
        }
        EVP_DigestUpdate(ctx, (uint8_t *)dst + done, n);
        done += n;
    }
    if (!EVP_DigestFinal_ex(ctx, md, NULL)) {
        rc = SMP_ENOMEM;
        goto free_ctx;
    }
    if (memcmp(md, fsha, 32) != 0) {
        wm_errbuf(err, errlen, "%s/%s: data does not match its SHA-256 (corrupted cold file)",
                ct->dir, name);
        rc = SMP_EPROTO;
        goto free_ctx;
    }
    rc = SMP_OK;
free_ctx:
    EVP_MD_CTX_free(ctx);
    close(fd);
    return rc;
}

int cold_verify(const cold_tier *ct,
                const char *name_or_path,
                const char *key,
                uint64_t len,
                const uint8_t sha256[32],
                char *err,
                size_t errlen)
{
    int rc, fd;
    uint8_t fsha[32], md[32];
    char name[COLD_NAME_MAX];
    if (key == NULL || sha256 == NULL) {
        wm_errbuf(err, errlen, "cold check: no key or SHA-256 to check against");
        return SMP_EINVAL;
    }
    if ((rc = open_expected(ct, name_or_path, key, len, sha256, "check", &fd, fsha, name, err, errlen)) < 0)
        return rc;
    rc = hash_file_data(fd, len, md);
    close(fd);
    if (rc < 0) {
        wm_errbuf(err, errlen, "%s/%s: read: %s", ct->dir, name, smp_strerror(rc));
        return rc;
    }
    if (memcmp(md, fsha, 32) != 0) {
        wm_errbuf(err, errlen, "%s/%s: data does not match its SHA-256 (corrupted cold file)",
                ct->dir, name);
        return SMP_EPROTO;
    }
    return SMP_OK;
}

int cold_open_data(const cold_tier *ct,
                   const char *name_or_path,
                   int *fd_out,
                   uint64_t *len_out)
{
    int rc;
    uint64_t fbytes;
    uint8_t sha[32];
    char name[COLD_NAME_MAX];
    char *key;
    if (fd_out == NULL || len_out == NULL || cold_resolve(ct, name_or_path, name) < 0)
        return SMP_EINVAL;
    key = malloc(COLD_KEY_MAX + 1);
    if (key == NULL)
        return SMP_ENOMEM;
    rc = open_checked(ct, name, fd_out, len_out, sha, key, &fbytes);
    free(key);
    return rc;
}

int cold_delete(cold_tier *ct, const char *name_or_path)
{
    char name[COLD_NAME_MAX];
    if (cold_resolve(ct, name_or_path, name) < 0)
        return SMP_EINVAL;
    if (unlinkat(ct->dfd, name, 0) < 0)
        return errno == ENOENT ? SMP_ENOTFOUND : SMP_EIO;
    if (fsync(ct->dfd) < 0)
        return SMP_EIO;
    return SMP_OK;
}

/* Milliseconds since the file's last modification (0 if it is in the future). */
static uint64_t age_ms(const struct stat *st)
{
    struct timespec now;
    int64_t ms;
    clock_gettime(CLOCK_REALTIME, &now);
    ms = ((int64_t)now.tv_sec - (int64_t)st->st_mtim.tv_sec) * 1000 +
         ((int64_t)now.tv_nsec - (int64_t)st->st_mtim.tv_nsec) / 1000000;
    return ms > 0 ? (uint64_t)ms : 0;
}

/* 1 when the directory entry de of ct's directory is itself a directory
 * (not following a symlink; its type read when readdir did not give it). */
static int is_directory(const cold_tier *ct, const struct dirent *de)
{
    struct stat sb;
    if (de->d_type != DT_UNKNOWN)
        return de->d_type == DT_DIR;
    return fstatat(ct->dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode);
}

/* Walk the directory: treat the temporary files as rule says (those at
 * least rule->stale_ms old, every one when 0, are stale: deleted unless
 * rule->keep, and each told to rule->fn), count other entries as ignored -- a directory under a cold name
 * too: it is no cold file and unlinkat cannot delete it, so reporting it
 * as an orphan would ask fsck --repair for what it cannot do -- and call
 * fn(arg, name) for each other name of the form <64 hex>.cold (a file, a
 * FIFO, a symlink: what is not a regular file is then found corrupt, and
 * deletable) until it returns non-zero (returned).
 * SMP_EIO when the directory cannot be read.
 *
 * The walk reads through its own descriptor (openat of ".", a new open file
 * description: two walks at once, the control thread's inventory and the
 * task thread's fsck scan, never share a read position), and closedir
 * closes exactly that descriptor. A ThreadSanitizer build reports this
 * closedir as racing with libuv's accept4 (or epoll_ctl) on another thread
 * when the number was a socket of a libuv loop before: libuv closes its
 * sockets with syscall(SYS_close) and this libtsan does not intercept
 * openat or fdopendir, so TSan sees the socket's accept, never its close nor
 * this open, and takes the kernel's reuse of the number for a race. The
 * kernel hands a number out only once it is closed; nothing here closes a
 * descriptor another thread owns. */
static int walk_dir(cold_tier *ct,
                    const cold_tmp_rule *rule,
                    cold_inventory_stats *st,
                    int (*fn)(void *arg, const char *name),
                    void *arg)
{
    int rc = SMP_OK, dfd;
    DIR *d;
    struct dirent *de;
    dfd = openat(ct->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return SMP_EIO;
    d = fdopendir(dfd);
    if (d == NULL) {
        close(dfd);
        return SMP_EIO;
    }
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        size_t n = strlen(nm);
        if (is_tmp_name(nm)) {
            struct stat sb;
            if (fstatat(ct->dfd, nm, &sb, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            uint64_t age = age_ms(&sb);
            if (rule->stale_ms != 0 && age < rule->stale_ms) {
                st->tmps_kept++;
                continue;
            }
            cold_stale_tmp t = {.name = nm, .bytes = (uint64_t)sb.st_size, .age_ms = age};
            if (rule->keep) {
                st->tmps_stale_kept++;
                st->tmp_bytes_stale_kept += t.bytes;
            } else if (unlinkat(ct->dfd, nm, 0) == 0) {
                st->tmps_removed++;
                st->tmp_bytes_removed += t.bytes;
                t.removed = 1;
            } else {
                t.error = errno;
                st->tmps_stale_kept++;
                st->tmp_bytes_stale_kept += t.bytes;
            }
            if (rule->fn != NULL)
                rule->fn(rule->arg, &t);
            continue;
        }
        if (n != 64 + strlen(COLD_SUFFIX) || !is_hex_name(nm, COLD_SUFFIX)) {
            if (strcmp(nm, ".") != 0 && strcmp(nm, "..") != 0)
                st->ignored++;
            continue;
        }
        if (is_directory(ct, de)) {
            st->ignored++; /* no cold file, and not one a delete could remove */
            continue;
        }
        if ((rc = fn(arg, nm)) != 0)
            break;
    }
    if (st->tmps_removed > 0)
        (void)fsync(ct->dfd);
    closedir(d);
    return rc;
}

typedef struct inventory_walk {
    cold_tier *ct;
    int deep;
    cold_visit_fn fn;
    void *arg;
    cold_inventory_stats *st;
    char *key_buf;
} inventory_walk;

/* cold_inventory's step: check the header (and with deep the data) of name. */
static int inventory_file(void *arg, const char *nm)
{
    inventory_walk *w = arg;
    cold_entry e;
    int fd;
    memset(&e, 0, sizeof(e));
    e.name = nm;
    e.status = open_checked(w->ct, nm, &fd, &e.length, e.sha256, w->key_buf, &e.file_bytes);
    if (e.status == SMP_ENOTFOUND)
        return 0; /* deleted meanwhile */
    if (e.status == SMP_OK) {
        if (w->deep) {
            uint8_t md[32];
            int hr = hash_file_data(fd, e.length, md);
            if (hr < 0 || memcmp(md, e.sha256, 32) != 0)
                e.status = hr == SMP_EIO || hr == SMP_ENOMEM ? hr : SMP_EPROTO;
        }
        close(fd);
    }
    if (e.status == SMP_OK) {
        e.key = w->key_buf;
        w->st->bytes += e.length;
    } else {
        w->st->corrupt++;
    }
    w->st->files++;
    return w->fn != NULL ? w->fn(w->arg, &e) : 0;
}

int cold_inventory(cold_tier *ct,
                   uint64_t stale_tmp_ms,
                   int deep,
                   cold_visit_fn fn,
                   void *arg,
                   cold_inventory_stats *st)
{
    cold_tmp_rule rule = {.stale_ms = stale_tmp_ms};
    return cold_inventory_tmps(ct, &rule, deep, fn, arg, st);
}

int cold_inventory_tmps(cold_tier *ct,
                        const cold_tmp_rule *rule,
                        int deep,
                        cold_visit_fn fn,
                        void *arg,
                        cold_inventory_stats *st)
{
    int rc;
    cold_inventory_stats local;
    inventory_walk w = {ct, deep, fn, arg, NULL, NULL};

    if (st == NULL)
        st = &local;
    memset(st, 0, sizeof(*st));
    if (ct == NULL)
        return SMP_EINVAL;
    w.st = st;
    w.key_buf = malloc(COLD_KEY_MAX + 1);
    if (w.key_buf == NULL)
        return SMP_ENOMEM;
    rc = walk_dir(ct, rule, st, inventory_file, &w);
    free(w.key_buf);
    return rc;
}

typedef struct name_list {
    char **v;
    size_t n, cap;
} name_list;

static int collect_name(void *arg, const char *nm)
{
    name_list *l = arg;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        char **v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return SMP_ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    if ((l->v[l->n] = strdup(nm)) == NULL)
        return SMP_ENOMEM;
    l->n++;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int skip_name(void *arg, const char *nm)
{
    (void)arg;
    (void)nm;
    return 0;
}

int cold_sweep_tmps(cold_tier *ct, uint64_t stale_ms, cold_inventory_stats *st)
{
    cold_tmp_rule rule = {.stale_ms = stale_ms};
    if (ct == NULL || st == NULL || stale_ms == 0)
        return SMP_EINVAL;
    memset(st, 0, sizeof(*st));
    return walk_dir(ct, &rule, st, skip_name, NULL);
}

int cold_list_names(cold_tier *ct, uint64_t stale_tmp_ms, char ***names, size_t *n)
{
    cold_tmp_rule rule = {.stale_ms = stale_tmp_ms};
    return cold_list_names_tmps(ct, &rule, names, n);
}

int cold_list_names_tmps(cold_tier *ct, const cold_tmp_rule *rule, char ***names, size_t *n)
{
    int rc;
    cold_inventory_stats st;
    name_list l = {NULL, 0, 0};
    *names = NULL;
    *n = 0;
    if (ct == NULL)
        return SMP_EINVAL;
    memset(&st, 0, sizeof(st));
    rc = walk_dir(ct, rule, &st, collect_name, &l);
    if (rc != SMP_OK) {
        cold_names_free(l.v, l.n);
        return rc;
    }
    if (l.n > 1)
        qsort(l.v, l.n, sizeof(*l.v), cmp_names);
    *names = l.v;
    *n = l.n;
    return SMP_OK;
}

void cold_names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}
