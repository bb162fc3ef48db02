/* fuzz_oplog.c -- fuzz target: the file OpLog's recovery and replay of
 * segment files as the master finds them on disk at startup.
 *
 * Input: [split: 1 byte][segment bytes]. With bit 0x20 of split set, the
 * checksum of every record (walking the records' length fields) is first
 * recomputed, so that mutated headers and payloads get past the checksum
 * into the sequence checks and into replay. The segment bytes then go into
 * a fresh log directory as segment 000000000000000001.log (split & 0x1f ==
 * 0), or as two segments: the first holds the first (split & 0x1f) records
 * (walked the same way), the second the rest, named by (split >> 6):
 *   0 the sequence in the header of its first record (what a roll writes),
 *   1 that plus one (a gap), 2 that minus one (an overlap),
 *   3 the number of records in the first segment plus one,
 * so damage in a segment that is not the last and sequence gaps between
 * segments are reached too. Then, like master_recover():
 *   oplog_file_open (preallocation off, small segments, log lines
 *   swallowed); when it opens, oplog_replay of everything into a fresh
 *   obj_store (host records 1..7 through obj_apply_record, replay stopping
 *   at the first one that does not apply; other types counted and skipped).
 * A refusal is fine; a crash, a leak or a sanitizer report is not.
 *
 * A log that opened must also keep working: one record is appended, and
 * once it is durable the log is closed and opened again, which must succeed
 * and replay every record up to it (abort otherwise: a restart would lose a
 * durable record or refuse a log it wrote itself). A failed open must leave
 * no uv handle behind (uv_loop_close must succeed).
 *
 * Seeds: segments written by the OpLog itself, holding real host records
 * from the obj_store prepare functions (segment mount, put end, pin,
 * managed group, remove) and a plugin record: one segment (also with
 * checksums recomputed), a torn tail, a preallocated segment (zeros after
 * the records), two segments after a roll, an empty segment. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "fuzz.h"
#include "obj_store.h"
#include "oplog.h"

#define SEG_BYTES 4096    /* segment_bytes: small, so appends roll */
#define REC_FRAME 28      /* header 20 + checksum 8, as oplog_file.c writes */
#define REC_LEN_AT 16     /* offset of the payload length in a record */
#define REC_SEQ_AT 4      /* offset of the sequence in a record */
#define REC_HDR 20        /* the checksum covers the header and the payload */
#define SPLIT_RECS 0x1f   /* split byte: records in the first segment */
#define SPLIT_FIX_SUMS 0x20 /* split byte: recompute the checksums */
#define MAX_SEG_NAME UINT64_C(1000000000000) /* keeps names at 18 digits */
#define PLUGIN_TYPE 200   /* a type above the host range */
#define MAX_SEED 65536

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_oplog: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

static void swallow_line(void *arg, const char *line)
{
    (void)arg;
    (void)line;
}

/* The log directory, made once; emptied before every input. */
static const char *log_dir(void)
{
    static char dir[512];
    if (dir[0] == '\0') {
        snprintf(dir, sizeof(dir), "%s/oplog", fuzz_scratch());
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) die("cannot make the log directory", dir);
    }
    return dir;
}

static void seg_name(const char *dir, uint64_t first, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%018llu.log", dir, (unsigned long long)first);
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Where the first k records of buf end, by their length fields alone (no
 * checksum): a damaged length stops the walk early. *walked gets how many
 * were walked. */
static size_t split_offset(const uint8_t *buf, size_t size, unsigned k, unsigned *walked)
{
    size_t off = 0;
    *walked = 0;
    while (*walked < k && size - off >= REC_FRAME) {
        uint64_t len = get_le(buf + off + REC_LEN_AT, 4);
        if (len > size - off - REC_FRAME) break;
        off += REC_FRAME + (size_t)len;
        (*walked)++;
    }
    return off;
}

/* Recompute the checksum of every record of buf that its length fields
 * reach. */
static void fix_checksums(uint8_t *buf, size_t size)
{
    size_t off = 0;
    while (size - off >= REC_FRAME) {
        uint64_t len = get_le(buf + off + REC_LEN_AT, 4), sum;
        if (len > size - off - REC_FRAME) break;
        sum = XXH64(buf + off, REC_HDR + (size_t)len, 0);
        for (int i = 0; i < 8; i++)
            buf[off + REC_HDR + (size_t)len + (size_t)i] = (uint8_t)(sum >> (8 * i));
        off += REC_FRAME + (size_t)len;
    }
}

/* Write the input's segment file(s) into dir (see the top). */
static void write_segments(const char *dir, const uint8_t *data, size_t size)
{
    char path[600];
    uint8_t split = size > 0 ? data[0] : 0;
    unsigned k = split & SPLIT_RECS, walked = 0;
    size_t n = size > 0 ? size - 1 : 0, at;
    uint8_t *seg = malloc(n ? n : 1);
    uint64_t second;

    if (seg == NULL) die("out of memory", NULL);
    if (n > 0) memcpy(seg, data + 1, n);
    if (split & SPLIT_FIX_SUMS) fix_checksums(seg, n);
    seg_name(dir, 1, path, sizeof(path));
    if (k == 0) {
        if (fuzz_write_file(path, seg, n) < 0) die("cannot write a segment", path);
        free(seg);
        return;
    }
    at = split_offset(seg, n, k, &walked);
    second = n - at >= REC_SEQ_AT + 8 ? get_le(seg + at + REC_SEQ_AT, 8) : walked + 1;
    switch (split >> 6) {
    case 1: second++; break;
    case 2: second--; break;
    case 3: second = walked + 1; break;
    default: break;
    }
    if (second < 2 || second >= MAX_SEG_NAME) second = walked + 1 < 2 ? 2 : walked + 1;
    if (fuzz_write_file(path, seg, at) < 0) die("cannot write a segment", path);
    seg_name(dir, second, path, sizeof(path));
    if (fuzz_write_file(path, seg + at, n - at) < 0) die("cannot write a segment", path);
    free(seg);
}

/* What replay did, like master_recover's replay_one. */
typedef struct replay_ctx {
    obj_store *st;
    uint64_t host, other, last_seq;
    int refused; /* a host record did not apply: replay stopped there */
} replay_ctx;

static int replay_one(void *arg, const oplog_record *rec)
{
    replay_ctx *c = arg;
    int rc;
    if (rec->seq != c->last_seq + 1) die("replay skipped or repeated a sequence", NULL);
    if (rec->type >= 1 && rec->type <= SMP_OPLOG_HOST_TYPE_MAX) {
        if ((rc = obj_apply_record(c->st, rec->type, rec->encver, rec->payload, rec->len)) < 0) {
            c->refused = 1;
            return rc;
        }
        c->host++;
    } else {
        c->other++;
    }
    c->last_seq = rec->seq;
    return SMP_OK;
}

static oplog_file_options log_options(const char *dir)
{
    oplog_file_options o;
    memset(&o, 0, sizeof(o));
    o.dir = dir;
    o.segment_bytes = SEG_BYTES;
    o.preallocate = 0;
    o.log_fn = swallow_line;
    return o;
}

/* Replay the whole log into a fresh store; *ctx tells what was replayed.
 * Replay may stop at a host record that does not apply, but a log that
 * opened holds only records that verified: any other failure aborts, and so
 * does a replay that ends before the log's last sequence. */
static void replay_all(oplog *log, replay_ctx *ctx)
{
    char err[512] = "";
    int rc;
    memset(ctx, 0, sizeof(*ctx));
    if (obj_store_create(&ctx->st, NULL) != SMP_OK) die("out of memory", NULL);
    rc = oplog_replay(log, 0, replay_one, ctx, err, sizeof(err));
    obj_store_destroy(ctx->st);
    ctx->st = NULL;
    if (rc < 0 && !ctx->refused) die("replay of a log that opened failed", err);
    if (rc == 0 && ctx->last_seq != oplog_last_seq(log))
        die("replay ended before the log's last sequence", NULL);
}

typedef struct durable {
    int done;
    int status;
} durable;

static void on_durable(void *arg, int status, uint64_t seq)
{
    durable *d = arg;
    (void)seq;
    d->done = 1;
    d->status = status;
}

/* Close the log and let its handle close. */
static void close_log(uv_loop_t *loop, oplog *log)
{
    oplog_close(log);
    uv_run(loop, UV_RUN_DEFAULT);
}

/* A log that opened takes one more record; once it is durable, the log
 * reopens and replays up to it. The log is closed on return. */
static void check_append_reopen(uv_loop_t *loop, const char *dir, oplog *log)
{
    static const uint8_t payload[] = "fuzz_oplog appended";
    oplog_file_options o = log_options(dir);
    durable d = {0, 0};
    replay_ctx ctx;
    char err[512] = "";
    uint64_t seq = 0;
    int rc;

    if (oplog_append(log, PLUGIN_TYPE, 1, payload, sizeof(payload), on_durable, &d, &seq) < 0) {
        close_log(loop, log);
        return;
    }
    while (!d.done) uv_run(loop, UV_RUN_ONCE);
    close_log(loop, log);
    if (d.status != 0) return; /* the disk failed: nothing to hold the log to */
    log = NULL;
    if ((rc = oplog_file_open(loop, &o, &log, err, sizeof(err))) != 0)
        die("a log that took a durable record does not open again", err);
    if (oplog_last_seq(log) != seq) die("a reopened log lost its last durable record", NULL);
    replay_all(log, &ctx);
    close_log(loop, log);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = log_dir();
    oplog_file_options o = log_options(dir);
    uv_loop_t loop;
    oplog *log = NULL;
    replay_ctx ctx;
    char err[512] = "";

    fuzz_empty_dir(dir);
    write_segments(dir, data, size);
    if (uv_loop_init(&loop) != 0) die("cannot make a uv loop", NULL);
    if (oplog_file_open(&loop, &o, &log, err, sizeof(err)) == 0) {
        replay_all(log, &ctx);
        /* A host record that does not apply stops recovery; the log itself
         * is sound, so it must still take records and reopen. */
        check_append_reopen(&loop, dir, log);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0) die("the OpLog left a uv handle open", NULL);
    return 0;
}

/* -- seeds ------------------------------------------------------------------ */

/* Fill recs with the host records a master appends for a small life: a
 * segment, two puts, a pin, a managed group, a removal. Returns how many
 * (owned by the caller), or a negative code and nothing to free. */
static int host_records(obj_record *recs, int max)
{
    obj_store *st = NULL;
    obj_put_params p1 = {"kv/one", 100, SMP_DATA_KV, NULL, "tenant-a", 0, 0, NULL, 0};
    obj_put_params p2 = {"w/m/r1/obj-0", 4096, SMP_DATA_WEIGHT, "w/m/r1", NULL, 0, 0, NULL, 0};
    uint8_t sum[32];
    int n = 0, rc = SMP_OK;
    memset(sum, 0x5a, sizeof(sum));
    if (obj_store_create(&st, NULL) != SMP_OK) return SMP_ENOMEM;
#define STEP(call)                                                                     \
    do {                                                                               \
        if (rc == SMP_OK && n < max && (rc = (call)) == SMP_OK)                        \
            rc = obj_apply_record(st, recs[n].type, recs[n].encver, recs[n].buf,       \
                                  recs[n].len);                                        \
        if (rc == SMP_OK) n++;                                                         \
    } while (0)
    STEP(obj_prepare_segment_mount(st, "seg-a", "node-a", 1 << 20, &recs[n]));
    if (rc == SMP_OK) rc = obj_put_start(st, &p1, 10, NULL);
    STEP(obj_prepare_put_end(st, "kv/one", sum, 11, &recs[n]));
    if (rc == SMP_OK) rc = obj_put_start(st, &p2, 12, NULL);
    STEP(obj_prepare_put_end(st, "w/m/r1/obj-0", sum, 13, &recs[n]));
    STEP(obj_prepare_set_pin(st, "kv/one", 1, &recs[n]));
    STEP(obj_prepare_group_managed(st, "w/m/r1", "weight_mgmt", 1, &recs[n]));
    STEP(obj_prepare_remove(st, "kv/one", 14, &recs[n]));
#undef STEP
    obj_store_destroy(st);
    if (rc != SMP_OK) {
        for (int i = 0; i < n; i++) obj_record_free(&recs[i]);
        return rc;
    }
    return n;
}

/* Read the file at path into buf (cap bytes). Returns its length or -1. */
static long read_file(const char *path, uint8_t *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n;
    if (f == NULL) return -1;
    n = fread(buf, 1, cap, f);
    fclose(f);
    return (long)n;
}

/* Write the records into a fresh log in dir (one group commit per record,
 * so that a small segment_bytes rolls), plus one plugin record. Returns 0
 * or a negative code. */
static int write_log(const char *dir, obj_record *recs, int n, uint64_t seg_bytes, int prealloc)
{
    static const uint8_t plugin_payload[] = "plugin record";
    oplog_file_options o = log_options(dir);
    uv_loop_t loop;
    oplog *log = NULL;
    char err[512] = "";
    int rc;
    o.segment_bytes = seg_bytes;
    o.preallocate = prealloc;
    fuzz_empty_dir(dir);
    if (uv_loop_init(&loop) != 0) return SMP_ENOMEM;
    if ((rc = oplog_file_open(&loop, &o, &log, err, sizeof(err))) != 0) {
        fprintf(stderr, "fuzz_oplog: seeds: %s\n", err);
        goto close_loop;
    }
    for (int i = 0; i <= n && rc == 0; i++) {
        durable d = {0, 0};
        if (i < n)
            rc = oplog_append(log, recs[i].type, recs[i].encver, recs[i].buf, recs[i].len,
                              on_durable, &d, NULL);
        else
            rc = oplog_append(log, PLUGIN_TYPE, 1, plugin_payload, sizeof(plugin_payload),
                              on_durable, &d, NULL);
        while (rc == 0 && !d.done) uv_run(&loop, UV_RUN_ONCE);
        if (rc == 0) rc = d.status;
    }
    close_log(&loop, log);
close_loop:
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
}

/* Seed `name`: the split byte, then segments first..first+nsegs-1 of dir
 * concatenated, the first cut to keep bytes when keep is not SIZE_MAX. */
static int seed_from_log(const char *dir, const char *out_dir, const char *name, uint8_t split,
                         const uint64_t *firsts, int nsegs, size_t keep)
{
    uint8_t *buf = malloc(MAX_SEED);
    char path[600];
    size_t n = 1;
    int rc = -1;
    if (buf == NULL) return -1;
    buf[0] = split;
    for (int i = 0; i < nsegs; i++) {
        seg_name(dir, firsts[i], path, sizeof(path));
        long got = read_file(path, buf + n, MAX_SEED - n);
        if (got < 0) goto out;
        if (i == 0 && keep != SIZE_MAX && (size_t)got > keep) got = (long)keep;
        n += (size_t)got;
    }
    rc = fuzz_seed(out_dir, name, buf, n);
out:
    free(buf);
    return rc;
}

int fuzz_seeds(const char *out_dir)
{
    obj_record recs[8];
    char dir[512];
    int n = 0, nrec, rc;
    struct stat sb;
    unsigned first_recs = 0;
    uint64_t firsts[8];
    int nsegs = 0;

    snprintf(dir, sizeof(dir), "%s/seed-oplog", fuzz_scratch());
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) return -1;
    if ((nrec = host_records(recs, 8)) < 0) {
        fprintf(stderr, "fuzz_oplog: seeds: cannot prepare records: %s\n", smp_strerror(nrec));
        return -1;
    }
    memset(recs + nrec, 0, sizeof(recs[0]) * (size_t)(8 - nrec));

    /* One segment with every record; then the same with its last record
     * torn (its checksum and the end of its payload missing). */
    if (write_log(dir, recs, nrec, SEG_BYTES, 0) != 0) goto fail;
    firsts[0] = 1;
    if ((rc = seed_from_log(dir, out_dir, "one-segment", 0, firsts, 1, SIZE_MAX)) < 0) goto fail;
    n += rc;
    if ((rc = seed_from_log(dir, out_dir, "one-segment-fix-sums", SPLIT_FIX_SUMS, firsts, 1,
                            SIZE_MAX)) < 0)
        goto fail;
    n += rc;
    {
        char path[600];
        seg_name(dir, 1, path, sizeof(path));
        if (stat(path, &sb) < 0 || sb.st_size < REC_FRAME) goto fail;
    }
    if ((rc = seed_from_log(dir, out_dir, "torn-tail", 0, firsts, 1, (size_t)sb.st_size - 12)) <
        0)
        goto fail;
    n += rc;
    /* The one segment as two: split after three records. */
    if ((rc = seed_from_log(dir, out_dir, "split-after-3", 3, firsts, 1, SIZE_MAX)) < 0)
        goto fail;
    n += rc;

    /* A preallocated segment: zeros after the records. */
    if (write_log(dir, recs, nrec, SEG_BYTES, 1) != 0) goto fail;
    if ((rc = seed_from_log(dir, out_dir, "preallocated", 0, firsts, 1, SIZE_MAX)) < 0)
        goto fail;
    n += rc;

    /* Tiny segments: every group commit after the first rolls. The seed is
     * the first segment, then every later one (contiguous records), split
     * after the first segment's records. */
    if (write_log(dir, recs, nrec, 64, 0) != 0) goto fail;
    for (uint64_t s = 1; s <= (uint64_t)nrec + 1 && nsegs < 8; s++) {
        char path[600];
        seg_name(dir, s, path, sizeof(path));
        if (stat(path, &sb) == 0) firsts[nsegs++] = s;
    }
    if (nsegs < 2) goto fail;
    first_recs = (unsigned)(firsts[1] - firsts[0]);
    if ((rc = seed_from_log(dir, out_dir, "rolled", (uint8_t)first_recs, firsts, nsegs,
                            SIZE_MAX)) < 0)
        goto fail;
    n += rc;

    /* An empty segment. */
    if ((rc = fuzz_seed(out_dir, "empty", (const uint8_t *)"", 1)) < 0) goto fail;
    n += rc;
    goto out;
fail:
    fprintf(stderr, "fuzz_oplog: seeds: cannot write the seed logs in %s\n", dir);
    n = -1;
out:
    for (int i = 0; i < nrec; i++) obj_record_free(&recs[i]);
    fuzz_empty_dir(dir);
    return n;
}
