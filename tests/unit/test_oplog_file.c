/* test_oplog_file.c -- the file OpLog against real files and real fsync.
 *
 * Each test gets a fresh mkdtemp directory under /tmp (the log lives in its
 * oplog/ subdirectory, which open creates) and its own uv loop. Files are
 * damaged by hand between a close and a reopen to pin recovery: a torn tail
 * is cut, anything else refuses the open and leaves the files as they were. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/fiemap.h>
#include <linux/fs.h>

#include "oplog.h"

#define MAX_CB 4096
#define MAX_LINES 16
#define REC_FRAME 28 /* header 20 + checksum 8, as oplog_file.c writes it */

typedef struct fixture {
    char root[64];
    char dir[128];
    uv_loop_t loop;
    char lines[MAX_LINES][512];
    int nlines;
} fixture;

/* What the durable callbacks saw. */
typedef struct cb_log {
    int n;
    uint64_t seq[MAX_CB];
    int status[MAX_CB];
    oplog *log;         /* when set, each callback tries an append */
    int append_rc;      /* what that append returned */
} cb_log;

/* What replay delivered (copies). */
typedef struct replayed {
    int n;
    uint64_t seq[MAX_CB];
    uint16_t type[MAX_CB];
    uint16_t encver[MAX_CB];
    uint32_t len[MAX_CB];
    uint8_t *payload[MAX_CB];
    uint64_t stop_at;   /* return SMP_EPROTO at this seq; 0: never */
} replayed;

static void capture_line(void *arg, const char *line)
{
    fixture *fx = arg;
    if (fx->nlines < MAX_LINES)
        snprintf(fx->lines[fx->nlines++], sizeof(fx->lines[0]), "%s", line);
}

static int has_line(const fixture *fx, const char *needle)
{
    for (int i = 0; i < fx->nlines; i++)
        if (strstr(fx->lines[i], needle) != NULL)
            return 1;
    return 0;
}

static void on_durable(void *arg, int status, uint64_t seq)
{
    cb_log *c = arg;
    if (c->n < MAX_CB) {
        c->seq[c->n] = seq;
        c->status[c->n] = status;
    }
    c->n++;
    if (c->log != NULL)
        c->append_rc = oplog_append(c->log, 1, 1, "x", 1, NULL, NULL, NULL);
}

static int on_replay(void *arg, const oplog_record *rec)
{
    replayed *r = arg;
    if (r->stop_at != 0 && rec->seq == r->stop_at)
        return SMP_EPROTO;
    assert_true(r->n < MAX_CB);
    r->seq[r->n] = rec->seq;
    r->type[r->n] = rec->type;
    r->encver[r->n] = rec->encver;
    r->len[r->n] = rec->len;
    r->payload[r->n] = malloc(rec->len ? rec->len : 1);
    assert_non_null(r->payload[r->n]);
    memcpy(r->payload[r->n], rec->payload, rec->len);
    r->n++;
    return 0;
}

static void replayed_free(replayed *r)
{
    for (int i = 0; i < r->n; i++)
        free(r->payload[i]);
    r->n = 0;
}

/* The payload of record seq: deterministic bytes of a length that varies. */
static void make_payload(uint64_t seq, uint8_t *buf, size_t len)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(seq * 31 + i * 7);
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    snprintf(fx->root, sizeof(fx->root), "/tmp/oplog_test_XXXXXX");
    assert_non_null(mkdtemp(fx->root));
    snprintf(fx->dir, sizeof(fx->dir), "%s/oplog", fx->root);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    DIR *d = opendir(fx->dir);
    if (d != NULL) {
        struct dirent *de;
        char path[512];
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", fx->dir, de->d_name);
            unlink(path);
        }
        closedir(d);
        rmdir(fx->dir);
    }
    rmdir(fx->root);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    free(fx);
    return 0;
}

static oplog_file_options default_opts(fixture *fx)
{
    oplog_file_options o = {0};
    o.dir = fx->dir;
    o.log_fn = capture_line;
    o.log_arg = fx;
    return o;
}

static oplog *open_ok(fixture *fx, const oplog_file_options *o)
{
    oplog *log = NULL;
    char err[512] = "";
    int rc = oplog_file_open(&fx->loop, o, &log, err, sizeof(err));
    if (rc != 0)
        fail_msg("open failed (%d): %s", rc, err);
    assert_non_null(log);
    return log;
}

static void close_log(fixture *fx, oplog *log)
{
    oplog_close(log);
    uv_run(&fx->loop, UV_RUN_DEFAULT); /* lets the async handle close */
}

static void run_until(fixture *fx, const cb_log *c, int n)
{
    while (c->n < n)
        uv_run(&fx->loop, UV_RUN_ONCE);
}

/* Append records first..first+n-1 with payload length len (or varying when
 * len is SIZE_MAX) and check the assigned sequences. */
static void append_n(oplog *log, uint64_t first, int n, size_t len, cb_log *c)
{
    uint8_t buf[512];
    for (int i = 0; i < n; i++) {
        uint64_t seq = 0, want = first + (uint64_t)i;
        size_t l = len == SIZE_MAX ? (size_t)(want * 13 % 300) : len;
        make_payload(want, buf, l);
        assert_int_equal(oplog_append(log, (uint16_t)(want % 12 + 1), (uint16_t)(want % 3),
                                      buf, l, on_durable, c, &seq), 0);
        assert_int_equal(seq, want);
    }
}

static void check_replayed(const replayed *r, uint64_t first, int n, size_t len)
{
    uint8_t buf[512];
    assert_int_equal(r->n, n);
    for (int i = 0; i < n; i++) {
        uint64_t want = first + (uint64_t)i;
        size_t l = len == SIZE_MAX ? (size_t)(want * 13 % 300) : len;
        make_payload(want, buf, l);
        assert_int_equal(r->seq[i], want);
        assert_int_equal(r->type[i], want % 12 + 1);
        assert_int_equal(r->encver[i], want % 3);
        assert_int_equal(r->len[i], l);
        assert_memory_equal(r->payload[i], buf, l);
    }
}

static void replay_ok(oplog *log, uint64_t after, replayed *r)
{
    char err[512] = "";
    int rc = oplog_replay(log, after, on_replay, r, err, sizeof(err));
    if (rc != 0)
        fail_msg("replay failed (%d): %s", rc, err);
}

static void seg_path(const fixture *fx, uint64_t first, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%018" PRIu64 ".log", fx->dir, first);
}

/* Sorted first sequences of the segment files; returns how many. */
static int list_segs(const fixture *fx, uint64_t *out, int max)
{
    int n = 0;
    struct dirent *de;
    DIR *d = opendir(fx->dir);
    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        if (strlen(de->d_name) == 22 && strcmp(de->d_name + 18, ".log") == 0 && n < max)
            out[n++] = strtoull(de->d_name, NULL, 10);
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            uint64_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

static uint8_t *read_all(const char *path, size_t *len)
{
    struct stat st;
    uint8_t *buf;
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    *len = (size_t)st.st_size;
    buf = malloc(*len + 1);
    assert_non_null(buf);
    assert_int_equal(read(fd, buf, *len), (ssize_t)*len);
    close(fd);
    return buf;
}

static void write_all(const char *path, const uint8_t *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, len), (ssize_t)len);
    close(fd);
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

/* Write a log of n records with payload length len and close it. */
static void make_log(fixture *fx, const oplog_file_options *o, int n, size_t len)
{
    cb_log c = {0};
    oplog *log = open_ok(fx, o);
    append_n(log, oplog_last_seq(log) + 1, n, len, &c);
    run_until(fx, &c, n);
    close_log(fx, log);
}

/* Open the log of o again, check that it replays records 1..n of len bytes
 * (as append_n made them), and close it. */
static void reopen_replays(fixture *fx, const oplog_file_options *o, int n, size_t len)
{
    replayed r = {0};
    oplog *log = open_ok(fx, o);
    replay_ok(log, 0, &r);
    check_replayed(&r, 1, n, len);
    replayed_free(&r);
    close_log(fx, log);
}

/* -- tests ------------------------------------------------------------------- */

/* Durable callbacks come in sequence order with status 0, and a reopened log
 * replays exactly the bytes, types and encoding versions that were appended;
 * appends then continue after the last sequence. */
static void test_append_is_durable_in_order_and_replays_the_same_bytes(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    cb_log c = {0};
    replayed r = {0};
    uint64_t seq = 0;
    oplog *log = open_ok(fx, &o);

    assert_int_equal(oplog_last_seq(log), 0);
    replay_ok(log, 0, &r);
    assert_int_equal(r.n, 0);
    append_n(log, 1, 50, SIZE_MAX, &c);
    assert_int_equal(c.n, 0); /* never from inside append */
    assert_int_equal(oplog_last_seq(log), 50);
    uv_run(&fx->loop, UV_RUN_DEFAULT); /* returns once nothing is owed */
    assert_int_equal(c.n, 50);
    for (int i = 0; i < 50; i++) {
        assert_int_equal(c.seq[i], (uint64_t)i + 1);
        assert_int_equal(c.status[i], 0);
    }
    assert_int_equal(oplog_durable_seq(log), 50);
    close_log(fx, log);

    log = open_ok(fx, &o);
    assert_int_equal(oplog_last_seq(log), 50);
    assert_int_equal(oplog_durable_seq(log), 50);
    replay_ok(log, 0, &r);
    check_replayed(&r, 1, 50, SIZE_MAX);
    replayed_free(&r);
    replay_ok(log, 20, &r); /* records <= after_seq are skipped */
    check_replayed(&r, 21, 30, SIZE_MAX);
    replayed_free(&r);
    assert_int_equal(oplog_append(log, 1, 0, "z", 1, on_durable, &c, &seq), 0);
    assert_int_equal(seq, 51);
    run_until(fx, &c, 51);
    assert_int_equal(c.status[50], 0);
    close_log(fx, log);
    assert_int_equal(fx->nlines, 0); /* nothing was torn */
}

/* Appends reach the writer once per turn of the loop, so the 500 issued
 * before the loop runs share one sync; max_batch_records cuts that hand-over
 * into commits of at most so many records. */
static void test_group_commit_makes_fewer_syncs_than_records(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    cb_log c = {0};
    oplog_stats st;
    oplog *log = open_ok(fx, &o);

    append_n(log, 1, 500, 64, &c);
    run_until(fx, &c, 500);
    oplog_stats_get(log, &st);
    assert_int_equal(st.appends, 500);
    assert_int_equal(st.durable_count, 500);
    assert_int_equal(st.failed, 0);
    assert_int_equal(st.syncs, 1);
    assert_int_equal(st.batches, 1);
    assert_int_equal(st.max_batch, 500);
    assert_int_equal(st.bytes, 500 * (64 + REC_FRAME));
    assert_true(st.durable_lat_ns_sum > 0);
    close_log(fx, log);

    o.max_batch_records = 8;
    log = open_ok(fx, &o);
    append_n(log, 501, 100, 64, &c);
    run_until(fx, &c, 600);
    oplog_stats_get(log, &st);
    assert_int_equal(st.max_batch, 8);
    assert_int_equal(st.batches, (100 + 7) / 8);
    close_log(fx, log);
}

typedef struct turn_appender {
    uv_timer_t timer;
    oplog *log;
    cb_log *c;
} turn_appender;

static void append_from_timer(uv_timer_t *t)
{
    turn_appender *a = t->data;
    append_n(a->log, 2, 20, 64, a->c);
}

/* Appends made outside the I/O callbacks of a turn (here a timer's) are
 * handed over before the loop waits: they are made durable with nothing
 * else happening, in one sync. So are those a durable callback makes. */
static void test_appends_of_one_turn_share_a_sync_wherever_they_are_made(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    cb_log c = {0};
    oplog_stats st;
    oplog *log = open_ok(fx, &o);
    turn_appender a = {.log = log, .c = &c};

    append_n(log, 1, 1, 64, &c);
    run_until(fx, &c, 1);
    assert_int_equal(uv_timer_init(&fx->loop, &a.timer), 0);
    a.timer.data = &a;
    assert_int_equal(uv_timer_start(&a.timer, append_from_timer, 1, 0), 0);
    run_until(fx, &c, 21);
    oplog_stats_get(log, &st);
    assert_int_equal(st.syncs, 2);
    assert_int_equal(st.max_batch, 20);

    c.log = log; /* each of the next callbacks appends one record, no callback */
    append_n(log, 22, 5, 64, &c);
    run_until(fx, &c, 26);
    assert_int_equal(c.append_rc, 0);
    while (oplog_durable_seq(log) < 31)
        uv_run(&fx->loop, UV_RUN_ONCE);
    oplog_stats_get(log, &st);
    assert_int_equal(st.syncs, 4); /* the five, then the five they appended */
    c.log = NULL;
    uv_close((uv_handle_t *)&a.timer, NULL);
    close_log(fx, log);
}

/* Past segment_bytes the log rolls to a new file named by its first sequence;
 * replay after reopen crosses every segment in order. */
static void test_segments_roll_and_replay_crosses_them(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    uint64_t segs[64];
    replayed r = {0};
    cb_log c = {0};
    int n;
    oplog *log;

    o.segment_bytes = 1024;
    o.max_batch_records = 4;
    make_log(fx, &o, 60, 100); /* 128 bytes a record */
    n = list_segs(fx, segs, 64);
    assert_true(n >= 3);
    assert_int_equal(segs[0], 1);
    for (int i = 0; i + 1 < n; i++) {
        char path[256];
        seg_path(fx, segs[i], path, sizeof(path));
        /* whole records only, and a segment closes once it reached the limit */
        assert_int_equal(file_size(path), (segs[i + 1] - segs[i]) * 128);
        assert_true(file_size(path) >= 1024);
    }

    log = open_ok(fx, &o);
    assert_int_equal(oplog_last_seq(log), 60);
    replay_ok(log, 0, &r);
    check_replayed(&r, 1, 60, 100);
    replayed_free(&r);
    replay_ok(log, segs[1] + 2, &r); /* starts inside the second segment */
    check_replayed(&r, segs[1] + 3, (int)(60 - segs[1] - 2), 100);
    replayed_free(&r);
    append_n(log, 61, 1, 100, &c);
    run_until(fx, &c, 1);
    close_log(fx, log);
}

/* truncate_before drops the segments whose records are all below the given
 * sequence, keeps the one holding it, and replay from there still works;
 * replay from before the kept records is refused (they are gone). */
static void test_truncate_before_drops_old_segments_and_keeps_later_records(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    uint64_t segs[64], after[64];
    replayed r = {0};
    cb_log c = {0};
    char err[512] = "";
    int n, m;
    uint64_t cut;
    oplog *log;

    o.segment_bytes = 1024;
    o.max_batch_records = 4;
    make_log(fx, &o, 60, 100);
    n = list_segs(fx, segs, 64);
    assert_true(n >= 4);
    cut = segs[2] + 1; /* inside the third segment */

    log = open_ok(fx, &o);
    assert_int_equal(oplog_truncate_before(log, cut), 0);
    append_n(log, 61, 1, 100, &c); /* the writer drops before this batch */
    run_until(fx, &c, 1);
    m = list_segs(fx, after, 64);
    assert_int_equal(m, n - 2);
    assert_int_equal(after[0], segs[2]);
    close_log(fx, log);

    log = open_ok(fx, &o);
    assert_int_equal(oplog_last_seq(log), 61);
    replay_ok(log, cut - 1, &r);
    check_replayed(&r, cut, (int)(61 - cut + 1), 100);
    replayed_free(&r);
    assert_int_equal(oplog_replay(log, 0, on_replay, &r, err, sizeof(err)), SMP_EPROTO);
    assert_non_null(strstr(err, "missing"));
    assert_int_equal(r.n, 0);
    /* the last segment is never dropped */
    m = list_segs(fx, after, 64);
    assert_int_equal(oplog_truncate_before(log, 1000), 0);
    close_log(fx, log);
    assert_int_equal(list_segs(fx, segs, 64), 1);
    assert_int_equal(segs[0], after[m - 1]);
}

/* A last record cut anywhere (inside its header, payload or checksum), a
 * flipped checksum, or garbage after the last record is a torn tail: reopen
 * cuts it, says so in a log line, replays everything before it and appends
 * continue from there. */
static void test_torn_tail_is_cut_at_every_point_of_the_last_record(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    const size_t rec = 40 + REC_FRAME;
    const size_t keep_of_last[] = {1, 3, 10, 19, 20, 21, 40, 59, 60, 67};
    const size_t ncut = sizeof(keep_of_last) / sizeof(keep_of_last[0]);
    char path[256];
    size_t full_len;
    uint8_t *full;

    make_log(fx, &o, 5, 40);
    seg_path(fx, 1, path, sizeof(path));
    full = read_all(path, &full_len);
    assert_int_equal(full_len, 5 * rec);

    for (size_t v = 0; v < ncut + 2; v++) {
        uint8_t damaged[1024];
        size_t len;
        int expect_records = 4;
        replayed r = {0};
        cb_log c = {0};
        char needle[64];
        oplog *log;

        memcpy(damaged, full, full_len);
        if (v < ncut) {
            len = 4 * rec + keep_of_last[v];
        } else if (v == ncut) {           /* checksum of the last record flipped */
            len = full_len;
            damaged[full_len - 1] ^= 0x5a;
        } else {                          /* v == ncut + 1: garbage after the last record */
            len = full_len + 13;
            for (size_t i = 0; i < 13; i++)
                damaged[full_len + i] = (uint8_t)(0xa5 ^ i);
            expect_records = 5;
        }
        write_all(path, damaged, len);
        fx->nlines = 0;

        log = open_ok(fx, &o);
        snprintf(needle, sizeof(needle), "torn tail at offset %zu",
                 (size_t)expect_records * rec);
        assert_true(has_line(fx, needle));
        size_t torn = len;
        while (torn > (size_t)expect_records * rec && damaged[torn - 1] == 0)
            torn--;
        snprintf(needle, sizeof(needle), "cut there, %zu bytes after it were not zero",
                 torn - (size_t)expect_records * rec);
        assert_true(has_line(fx, needle));
        assert_int_equal(file_size(path), (uint64_t)expect_records * rec);
        assert_int_equal(oplog_last_seq(log), (uint64_t)expect_records);
        replay_ok(log, 0, &r);
        check_replayed(&r, 1, expect_records, 40);
        replayed_free(&r);
        append_n(log, (uint64_t)expect_records + 1, 1, 40, &c);
        run_until(fx, &c, 1);
        assert_int_equal(c.status[0], 0);
        close_log(fx, log);
        write_all(path, full, full_len); /* the next variant starts whole */
    }
    free(full);
}

/* Zeros from the end of the last record to the end of the file are space
 * never written (a preallocated segment looks like this): nothing is cut,
 * and the next record is written right after the last one, not after the
 * zeros. A torn record followed by zeros is cut, and the log line counts the
 * torn bytes only. */
static void test_zeros_after_the_last_record_are_unwritten_space(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    const size_t rec = 40 + REC_FRAME;
    char path[256];
    size_t full_len;
    uint8_t *full, damaged[4096] = {0};
    cb_log c = {0};
    oplog *log;

    make_log(fx, &o, 5, 40);
    seg_path(fx, 1, path, sizeof(path));
    full = read_all(path, &full_len);
    memcpy(damaged, full, full_len);
    write_all(path, damaged, full_len + 1000);
    fx->nlines = 0;
    log = open_ok(fx, &o);
    assert_false(has_line(fx, "torn tail"));
    assert_int_equal(file_size(path), full_len + 1000);
    assert_int_equal(oplog_last_seq(log), 5);
    append_n(log, 6, 1, 40, &c);
    run_until(fx, &c, 1);
    assert_int_equal(c.status[0], 0);
    close_log(fx, log);
    reopen_replays(fx, &o, 6, 40); /* record 6 sits at offset 5 * rec */

    /* the first 10 bytes of record 5's header, then zeros: 10 torn bytes */
    memcpy(damaged, full, full_len);
    memset(damaged + 4 * rec + 10, 0, sizeof(damaged) - 4 * rec - 10);
    memset(damaged + 4 * rec + 4, 0xee, 6); /* magic, then 6 torn bytes */
    write_all(path, damaged, full_len + 1000);
    fx->nlines = 0;
    log = open_ok(fx, &o);
    assert_true(has_line(fx, "torn tail at offset 272"));
    assert_true(has_line(fx, "10 bytes after it were not zero"));
    assert_int_equal(oplog_last_seq(log), 4);
    close_log(fx, log);
    free(full);
}

/* Zeros in the middle of the records, with a valid record after them, are
 * damage, not unwritten space: open refuses and touches nothing. */
static void test_zeros_before_a_valid_record_refuse_open(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    const size_t rec = 40 + REC_FRAME;
    char path[256], err[512] = "";
    size_t full_len, after_len;
    uint8_t *full, *after;
    oplog *log = NULL;

    make_log(fx, &o, 5, 40);
    seg_path(fx, 1, path, sizeof(path));
    full = read_all(path, &full_len);
    memset(full + rec, 0, rec); /* record 2 zeroed, 3..5 intact */
    write_all(path, full, full_len);
    assert_int_equal(oplog_file_open(&fx->loop, &o, &log, err, sizeof(err)), SMP_EPROTO);
    assert_null(log);
    assert_non_null(strstr(err, "not a torn tail"));
    after = read_all(path, &after_len);
    assert_int_equal(after_len, full_len);
    assert_memory_equal(after, full, full_len);
    free(after);
    free(full);
}

/* With preallocate a new segment has its full size at once, records land
 * from its start, and a reopen continues right after the last record (in a
 * rolled segment too). */
static void test_preallocated_segments_fill_from_the_start(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    char path[256];
    uint64_t segs[64];
    cb_log c = {0};
    oplog *log;
    int n;

    o.preallocate = 1;
    o.segment_bytes = 8192;
    o.max_batch_records = 4;
    log = open_ok(fx, &o);
    seg_path(fx, 1, path, sizeof(path));
    assert_int_equal(file_size(path), 8192);
    append_n(log, 1, 10, 100, &c);
    run_until(fx, &c, 10);
    close_log(fx, log);
    assert_int_equal(file_size(path), 8192);

    for (int round = 0; round < 3; round++) { /* reopen, append, reopen */
        cb_log more = {0};
        log = open_ok(fx, &o);
        assert_int_equal(oplog_last_seq(log), 10 + (uint64_t)round * 60);
        append_n(log, oplog_last_seq(log) + 1, 60, 100, &more);
        run_until(fx, &more, 60);
        close_log(fx, log);
    }
    n = list_segs(fx, segs, 64);
    assert_true(n >= 3); /* 190 records of 128 bytes roll 8 KiB segments */
    for (int i = 0; i < n; i++) {
        seg_path(fx, segs[i], path, sizeof(path));
        assert_true(file_size(path) >= 8192);
    }
    reopen_replays(fx, &o, 190, 100);
}

/* Bytes of [from, to) of path in extents the file system still marks
 * unwritten (preallocated, never written), or -1 when it cannot tell
 * (no FIEMAP, as on tmpfs). */
static long unwritten_bytes(const char *path, uint64_t from, uint64_t to)
{
    enum { MAX_EXTENTS = 256 };
    struct fiemap *fm = calloc(1, sizeof(*fm) + MAX_EXTENTS * sizeof(struct fiemap_extent));
    int fd = open(path, O_RDONLY);
    long n = -1;
    assert_non_null(fm);
    assert_true(fd >= 0);
    fm->fm_start = 0;
    fm->fm_length = FIEMAP_MAX_OFFSET;
    fm->fm_flags = FIEMAP_FLAG_SYNC;
    fm->fm_extent_count = MAX_EXTENTS;
    if (ioctl(fd, FS_IOC_FIEMAP, fm) == 0) {
        n = 0;
        for (unsigned i = 0; i < fm->fm_mapped_extents; i++) {
            const struct fiemap_extent *e = &fm->fm_extents[i];
            uint64_t a = e->fe_logical, b = e->fe_logical + e->fe_length;
            if (!(e->fe_flags & FIEMAP_EXTENT_UNWRITTEN)) continue;
            if (a < from) a = from;
            if (b > to) b = to;
            if (b > a) n += (long)(b - a);
        }
    }
    close(fd);
    free(fm);
    return n;
}

/* The writer writes zeros ahead of the data in a preallocated segment, so
 * syncs do not each convert a freshly used block: after 412 KiB of records
 * the blocks up to the data and a step past it are written, the end of the
 * segment is still only reserved, and the log replays the same records. */
static void test_preallocated_blocks_are_zeroed_ahead_of_the_data(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    char path[256];
    cb_log c = {0};
    oplog *log;

    o.preallocate = 1;
    o.segment_bytes = 4u << 20;
    log = open_ok(fx, &o);
    seg_path(fx, 1, path, sizeof(path));
    long before = unwritten_bytes(path, 0, o.segment_bytes);
    if (before <= 0) { /* nothing reserved-but-unwritten to see here */
        close_log(fx, log);
        skip();
    }
    append_n(log, 1, 800, 500, &c); /* 412 KiB of records */
    run_until(fx, &c, 800);
    uint64_t data = 800u * (500 + REC_FRAME);
    assert_int_equal(unwritten_bytes(path, 0, data + (64u << 10)), 0);
    assert_true(unwritten_bytes(path, 3u << 20, 4u << 20) == 1l << 20);
    close_log(fx, log);

    log = open_ok(fx, &o); /* a reopen continues after the data */
    cb_log more = {0};
    assert_int_equal(oplog_last_seq(log), 800);
    append_n(log, 801, 10, 500, &more);
    run_until(fx, &more, 10);
    close_log(fx, log);
    reopen_replays(fx, &o, 810, 500);
}

/* Zeros ahead of the data only save work: when they cannot be written (here
 * a file size limit of 128 KiB, which also refuses the preallocation), that
 * is logged and the records are made durable all the same. */
static void test_zeros_that_cannot_be_written_do_not_fail_the_log(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    struct rlimit old, lim;
    cb_log c = {0};
    oplog *log;

    o.preallocate = 1;
    o.segment_bytes = 4u << 20;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 128u << 10;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of a signal */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    log = open_ok(fx, &o);
    append_n(log, 1, 20, 500, &c);
    run_until(fx, &c, 20);
    close_log(fx, log);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, was);
    for (int i = 0; i < 20; i++) assert_int_equal(c.status[i], 0);
    assert_true(has_line(fx, "cannot write zeros ahead of the data"));

    reopen_replays(fx, &o, 20, 500);
}

/* A bad record followed by valid data is corruption, not a torn tail: open
 * refuses with a message naming the segment, offset and sequence, and the
 * file is left exactly as it was. */
static void test_corruption_in_the_middle_refuses_open_and_touches_nothing(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    const size_t rec = 40 + REC_FRAME;
    char path[256], err[512];
    size_t full_len, after_len;
    uint8_t *full, *after;
    uint64_t segs[8];
    oplog *log = NULL;

    make_log(fx, &o, 5, 40);
    seg_path(fx, 1, path, sizeof(path));
    full = read_all(path, &full_len);

    /* a payload byte of record 2, and then its length field */
    for (int v = 0; v < 2; v++) {
        uint8_t damaged[1024];
        memcpy(damaged, full, full_len);
        if (v == 0)
            damaged[rec + 20 + 3] ^= 0xff;
        else
            damaged[rec + 16 + 2] = 0x7f; /* len now far past the file */
        write_all(path, damaged, full_len);
        fx->nlines = 0;
        err[0] = '\0';
        assert_int_equal(oplog_file_open(&fx->loop, &o, &log, err, sizeof(err)),
                         SMP_EPROTO);
        assert_null(log);
        assert_non_null(strstr(err, path));
        assert_non_null(strstr(err, "offset 68:"));
        assert_non_null(strstr(err, "seq 2 "));
        assert_non_null(strstr(err, "not a torn tail"));
        after = read_all(path, &after_len);
        assert_int_equal(after_len, full_len);
        assert_memory_equal(after, damaged, full_len);
        free(after);
        assert_int_equal(list_segs(fx, segs, 8), 1);
        assert_int_equal(fx->nlines, 0);
    }
    free(full);
}

/* A damaged end of a segment that is not the last is not a torn tail either
 * (later segments exist): open refuses and names that segment. */
static void test_damage_in_an_earlier_segment_refuses_open(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    uint64_t segs[64];
    char path[256], err[512] = "";
    size_t len;
    uint8_t *buf;
    oplog *log = NULL;

    o.segment_bytes = 1024;
    o.max_batch_records = 4;
    make_log(fx, &o, 30, 100);
    assert_true(list_segs(fx, segs, 64) >= 2);
    seg_path(fx, segs[0], path, sizeof(path));
    buf = read_all(path, &len);
    assert_int_equal(truncate(path, (off_t)len - 5), 0);
    assert_int_equal(oplog_file_open(&fx->loop, &o, &log, err, sizeof(err)), SMP_EPROTO);
    assert_null(log);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "not the last"));
    assert_int_equal(file_size(path), len - 5);
    free(buf);
}

/* Sequences must be contiguous across segments: a missing segment refuses the
 * open, naming the segment after the gap. */
static void test_sequence_gap_between_segments_refuses_open(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    uint64_t segs[64];
    char path[256], err[512] = "";
    int n;
    oplog *log = NULL;

    o.segment_bytes = 1024;
    o.max_batch_records = 4;
    make_log(fx, &o, 60, 100);
    n = list_segs(fx, segs, 64);
    assert_true(n >= 3);
    seg_path(fx, segs[1], path, sizeof(path));
    assert_int_equal(unlink(path), 0);
    assert_int_equal(oplog_file_open(&fx->loop, &o, &log, err, sizeof(err)), SMP_EPROTO);
    assert_null(log);
    seg_path(fx, segs[2], path, sizeof(path));
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "gap"));
    assert_int_equal(list_segs(fx, segs, 64), n - 1);
}

/* Inside a segment too: a valid record carrying the wrong sequence (here a
 * copy of the next one) refuses the open, naming offset and both sequences. */
static void test_wrong_sequence_inside_a_segment_refuses_open(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    const size_t rec = 40 + REC_FRAME;
    char path[256], err[512] = "";
    size_t len;
    uint8_t *buf;
    oplog *log = NULL;

    make_log(fx, &o, 5, 40);
    seg_path(fx, 1, path, sizeof(path));
    buf = read_all(path, &len);
    memcpy(buf + 2 * rec, buf + 3 * rec, rec); /* seq 4 where 3 belongs */
    write_all(path, buf, len);
    assert_int_equal(oplog_file_open(&fx->loop, &o, &log, err, sizeof(err)), SMP_EPROTO);
    assert_null(log);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "offset 136: record has seq 4, expected 3"));
    assert_int_equal(file_size(path), len);
    free(buf);
}

/* A segment created by a roll just before a crash is empty: it is the last
 * one, so the log opens and the next append goes into it. */
static void test_empty_last_segment_is_accepted(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    char path[256];
    replayed r = {0};
    cb_log c = {0};
    oplog *log;
    int fd;

    make_log(fx, &o, 5, 40);
    seg_path(fx, 6, path, sizeof(path));
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    close(fd);
    log = open_ok(fx, &o);
    assert_int_equal(oplog_last_seq(log), 5);
    replay_ok(log, 0, &r);
    check_replayed(&r, 1, 5, 40);
    replayed_free(&r);
    append_n(log, 6, 1, 40, &c);
    run_until(fx, &c, 1);
    close_log(fx, log);
    assert_int_equal(file_size(path), 40 + REC_FRAME);
}

/* A failed sync fails every pending record with SMP_EDURABILITY, in order, and
 * leaves the log read-only: later appends and truncations are refused without
 * a callback. The failed records are not found after a reopen. */
static void test_sync_failure_fails_pending_records_and_refuses_later_appends(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    cb_log c = {0};
    replayed r = {0};
    oplog_stats st;
    uint64_t seq = 0;
    oplog *log;

    o.test_fail_sync_at = 2;
    log = open_ok(fx, &o);
    append_n(log, 1, 1, 40, &c);
    run_until(fx, &c, 1);
    assert_int_equal(c.status[0], 0);

    append_n(log, 2, 10, 40, &c);
    run_until(fx, &c, 11);
    for (int i = 1; i < 11; i++) {
        assert_int_equal(c.seq[i], (uint64_t)i + 1);
        assert_int_equal(c.status[i], SMP_EDURABILITY);
    }
    assert_true(has_line(fx, "read-only"));
    assert_int_equal(oplog_append(log, 1, 0, "x", 1, on_durable, &c, &seq),
                     SMP_EDURABILITY);
    assert_int_equal(oplog_truncate_before(log, 1), SMP_EDURABILITY);
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    assert_int_equal(c.n, 11);
    assert_int_equal(oplog_durable_seq(log), 1);
    oplog_stats_get(log, &st);
    assert_int_equal(st.failed, 10);
    assert_int_equal(st.durable_count, 1);
    assert_int_equal(st.syncs, 1);
    close_log(fx, log);
    assert_int_equal(c.n, 11);

    o.test_fail_sync_at = 0;
    log = open_ok(fx, &o);
    assert_int_equal(oplog_last_seq(log), 1);
    replay_ok(log, 0, &r);
    check_replayed(&r, 1, 1, 40);
    replayed_free(&r);
    close_log(fx, log);
}

/* A payload over max_record_bytes (and a NULL payload with a length) is
 * refused by append and never called back; the limit itself is accepted. */
static void test_oversized_payload_is_refused_without_callback(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    static uint8_t big[1001];
    cb_log c = {0};
    uint64_t seq = 77;
    oplog *log;

    o.max_record_bytes = 1000;
    log = open_ok(fx, &o);
    assert_int_equal(oplog_append(log, 1, 0, big, 1001, on_durable, &c, &seq), SMP_ERANGE);
    assert_int_equal(seq, 77);
    assert_int_equal(oplog_append(log, 1, 0, NULL, 5, on_durable, &c, &seq), SMP_EINVAL);
    assert_int_equal(oplog_last_seq(log), 0);
    assert_int_equal(oplog_append(log, 1, 0, big, 1000, on_durable, &c, &seq), 0);
    assert_int_equal(seq, 1);
    run_until(fx, &c, 1);
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.seq[0], 1);
    close_log(fx, log);
}

/* Closing with appends still queued writes and syncs them: their callbacks
 * run, in order and with status 0, before close returns; an append from such
 * a callback is refused; a reopen replays them all. */
static void test_close_with_pending_appends_makes_them_durable(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    cb_log c = {0};
    replayed r = {0};
    oplog *log = open_ok(fx, &o);

    append_n(log, 1, 200, SIZE_MAX, &c);
    c.log = log;
    c.append_rc = 0;
    oplog_close(log);
    assert_int_equal(c.n, 200);
    for (int i = 0; i < 200; i++) {
        assert_int_equal(c.seq[i], (uint64_t)i + 1);
        assert_int_equal(c.status[i], 0);
    }
    assert_int_equal(c.append_rc, SMP_ESTATE);
    uv_run(&fx->loop, UV_RUN_DEFAULT);

    log = open_ok(fx, &o);
    replay_ok(log, 0, &r);
    check_replayed(&r, 1, 200, SIZE_MAX);
    replayed_free(&r);
    close_log(fx, log);
}

/* A negative return of the replay callback stops replay and is returned;
 * replay after an append, or past the end of the log, is refused. */
static void test_replay_stops_on_error_and_is_refused_out_of_order(void **state)
{
    fixture *fx = *state;
    oplog_file_options o = default_opts(fx);
    cb_log c = {0};
    replayed r = {0};
    char err[512] = "";
    oplog *log;

    make_log(fx, &o, 5, 40);
    log = open_ok(fx, &o);
    r.stop_at = 3;
    assert_int_equal(oplog_replay(log, 0, on_replay, &r, err, sizeof(err)), SMP_EPROTO);
    assert_int_equal(r.n, 2);
    replayed_free(&r);
    r.stop_at = 0;
    assert_int_equal(oplog_replay(log, 9, on_replay, &r, err, sizeof(err)), SMP_EPROTO);
    assert_non_null(strstr(err, "ends at seq 5"));
    replay_ok(log, 5, &r);
    assert_int_equal(r.n, 0);
    append_n(log, 6, 1, 40, &c);
    assert_int_equal(oplog_replay(log, 0, on_replay, &r, err, sizeof(err)), SMP_ESTATE);
    run_until(fx, &c, 1);
    close_log(fx, log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_append_is_durable_in_order_and_replays_the_same_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_commit_makes_fewer_syncs_than_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_appends_of_one_turn_share_a_sync_wherever_they_are_made, setup, teardown),
        cmocka_unit_test_setup_teardown(test_segments_roll_and_replay_crosses_them, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate_before_drops_old_segments_and_keeps_later_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail_is_cut_at_every_point_of_the_last_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zeros_after_the_last_record_are_unwritten_space, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zeros_before_a_valid_record_refuse_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preallocated_segments_fill_from_the_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preallocated_blocks_are_zeroed_ahead_of_the_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zeros_that_cannot_be_written_do_not_fail_the_log, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption_in_the_middle_refuses_open_and_touches_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damage_in_an_earlier_segment_refuses_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sequence_gap_between_segments_refuses_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_sequence_inside_a_segment_refuses_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_last_segment_is_accepted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync_failure_fails_pending_records_and_refuses_later_appends, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversized_payload_is_refused_without_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_with_pending_appends_makes_them_durable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_stops_on_error_and_is_refused_out_of_order, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
