/* test_recovery_fail_closed.c -- what a real master does at startup with a
 * damaged log, a damaged snapshot and records or sections no loaded plugin
 * can take.
 *
 * Each test stops a store_master, changes what it left on disk or the
 * plugins it loads, and starts it again. A torn log tail is cut and every
 * intact acknowledged object is served; a snapshot with a flipped byte, a
 * record encoded newer than its plugin reads, a host record at a version
 * this build does not replay, or the removed key
 * oplog.carry_unknown_types each refuse the start with a log line naming
 * the cause, and leave every file of data_dir exactly as it was. Records and
 * sections of a disabled or absent plugin are carried verbatim, with no
 * configuration, and handed back when the plugin returns. The plugin state is observed through
 * tests/plugins/recorder.so (OpLog type 20, section "recorder", RPC service
 * 40); snapshot files are read back with snapshot.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "oplog.h"
#include "rpc_client.h"
#include "snapshot.h"

#define RECORDER_PATH BUILD_DIR "/lib/testplugins/recorder.so"
#define RECORDER_SERVICE 40
#define RECORDER_SET_NEXT 1
#define RECORDER_LIST 2
#define RECORDER_TYPE 20
#define START_MS 10000

/* Record layout of the file OpLog (oplog_file.c). */
#define REC_HDR 20
#define REC_SUM 8

/* -- files ------------------------------------------------------------------ */

static uint8_t *read_whole(const char *path, size_t *len)
{
    uint8_t *buf = hx_read_file(path, len);
    assert_non_null(buf);
    return buf;
}

static void write_whole(const char *path, const uint8_t *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of dir's regular files ending in suffix; *n of them. */
static char **list_files(const char *dir, const char *suffix, size_t *n)
{
    char **names = NULL;
    size_t cnt = 0, sl = strlen(suffix);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t nl = strlen(e->d_name);
        if (e->d_name[0] == '.' || nl < sl || strcmp(e->d_name + nl - sl, suffix) != 0) continue;
        names = realloc(names, (cnt + 1) * sizeof(*names));
        assert_non_null(names);
        names[cnt++] = strdup(e->d_name);
    }
    closedir(d);
    if (cnt > 1) qsort(names, cnt, sizeof(*names), cmp_str);
    *n = cnt;
    return names;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Path of the newest OpLog segment. */
static void last_segment(const hx_master *m, char *path, size_t cap)
{
    char dir[512];
    size_t n = 0;
    snprintf(dir, sizeof(dir), "%s/data/oplog", m->dir);
    char **names = list_files(dir, ".log", &n);
    assert_true(n > 0);
    snprintf(path, cap, "%s/%s", dir, names[n - 1]);
    free_names(names, n);
}

static uint64_t le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A record's place in a segment file. */
typedef struct seg_rec {
    size_t off;
    uint64_t seq;
    uint16_t type;
    uint16_t encver;
    uint32_t len;
} seg_rec;

/* Walk the records of a well-formed segment, up to the unwritten (zero)
 * space of a preallocated one; *n of them (malloc'd array). */
static seg_rec *segment_records(const char *path, size_t *n)
{
    size_t len = 0, off = 0, cnt = 0;
    uint8_t *buf = read_whole(path, &len);
    seg_rec *recs = NULL;
    while (off + REC_HDR + REC_SUM <= len && le(buf + off, 4) != 0) {
        seg_rec r = {off, le(buf + off + 4, 8), (uint16_t)le(buf + off + 12, 2),
                     (uint16_t)le(buf + off + 14, 2), (uint32_t)le(buf + off + 16, 4)};
        assert_true(off + REC_HDR + r.len + REC_SUM <= len);
        recs = realloc(recs, (cnt + 1) * sizeof(*recs));
        assert_non_null(recs);
        recs[cnt++] = r;
        off += REC_HDR + r.len + REC_SUM;
    }
    for (size_t i = off; i < len; i++) assert_int_equal(buf[i], 0);
    free(buf);
    *n = cnt;
    return recs;
}

static void snapshot_path(const hx_master *m, uint64_t seq, char *path, size_t cap)
{
    snprintf(path, cap, "%s/data/snapshots/snapshot-%020llu.snap", m->dir, (unsigned long long)seq);
}

static snap_image *load_snapshot(const char *path)
{
    char err[512];
    snap_image *img = NULL;
    if (snap_load_file(path, &img, err, sizeof(err)) != SMP_OK) fail_msg("%s", err);
    return img;
}

/* -- configs ------------------------------------------------------------------- */

#define RECORDER_ON 1
#define RECORDER_OFF 0

/* weight_mgmt.so (loaded or disabled) and the recorder (loaded or disabled,
 * max_encver 0 = its default); extra_yaml is appended ("" for none). */
static void configure_with(hx_master *m, int weights_on, int recorder_on, int max_encver,
                           const char *extra_yaml)
{
    char extra[1024], block[64] = "";
    if (max_encver > 0)
        snprintf(block, sizeof(block), "    config:\n      max_encver: %d\n", max_encver);
    snprintf(extra, sizeof(extra),
             "plugins:\n"
             "  - path: \"%s/lib/weight_mgmt.so\"\n    enabled: %s\n"
             "  - path: \"%s\"\n    enabled: %s\n%s%s",
             BUILD_DIR, weights_on ? "true" : "false", RECORDER_PATH,
             recorder_on ? "true" : "false", block, extra_yaml);
    assert_int_equal(hx_reconfigure(m, extra), 0);
}

static void configure(hx_master *m, int weights_on, int recorder_on, int max_encver)
{
    configure_with(m, weights_on, recorder_on, max_encver, "");
}

/* -- clients ----------------------------------------------------------------- */

static void put(kvc *c, const char *key, const char *content, uint64_t *seq)
{
    assert_int_equal(kvc_put_bytes(c, key, content, strlen(content), SMP_DATA_KV, NULL, 0, seq), 0);
}

static void assert_object(kvc *c, const char *key, const char *content)
{
    unsigned char sha[32];
    kvc_object obj;
    hx_sha256(content, strlen(content), sha);
    if (kvc_get(c, key, &obj) != 0) fail_msg("%s: %s", key, kvc_error(c));
    assert_int_equal(obj.size, strlen(content));
    assert_memory_equal(obj.sha256, sha, 32);
}

static void assert_absent(kvc *c, const char *key)
{
    int e = -1;
    assert_int_equal(kvc_exists(c, key, &e), 0);
    assert_int_equal(e, 0);
}

static rpcc_conn *recorder_connect(const hx_master *m)
{
    char err[256];
    rpcc_conn *r = NULL;
    rpcc_options opt = {.timeout_ms = 10000};
    if (rpcc_connect(m->socket, &opt, &r, err, sizeof(err)) != 0) fail_msg("%s", err);
    return r;
}

/* Append payload through the recorder; answered once durable. Its seq. */
static uint64_t recorder_set(const hx_master *m, const char *payload)
{
    rpcc_conn *r = recorder_connect(m);
    int st = -1;
    uint8_t *body = NULL;
    size_t len = 0;
    char *msg = NULL;
    assert_int_equal(rpcc_call(r, RECORDER_SERVICE, RECORDER_SET_NEXT, (const uint8_t *)payload,
                               strlen(payload), &st, &body, &len, &msg),
                     0);
    if (st != 0) fail_msg("recorder set_next: %s", msg ? msg : "?");
    assert_int_equal(len, 8);
    uint64_t seq = le(body, 8);
    free(body);
    rpcc_close(r);
    return seq;
}

/* The recorder's list, joined with ',' ("" when empty). */
static void recorder_list(const hx_master *m, char *out, size_t cap)
{
    rpcc_conn *r = recorder_connect(m);
    int st = -1;
    uint8_t *body = NULL;
    size_t len = 0, off = 0;
    assert_int_equal(rpcc_call(r, RECORDER_SERVICE, RECORDER_LIST, NULL, 0, &st, &body, &len, NULL), 0);
    assert_int_equal(st, 0);
    out[0] = '\0';
    while (off < len) {
        assert_true(len - off >= 4);
        uint32_t n = (uint32_t)le(body + off, 4);
        assert_true(n <= len - off - 4);
        snprintf(out + strlen(out), cap - strlen(out), "%s%.*s", out[0] ? "," : "", (int)n,
                 (const char *)body + off + 4);
        off += 4 + n;
    }
    free(body);
    rpcc_close(r);
}

static void assert_recorder_holds(const hx_master *m, const char *joined)
{
    char got[1024];
    recorder_list(m, got, sizeof(got));
    assert_string_equal(got, joined);
}

/* Start must be refused: exit status 1, these needles in the log, and not a
 * byte of data_dir changed. */
static void assert_start_refused(hx_master *m, const char *needle1, const char *needle2)
{
    assert_true(hx_start_refused(m, START_MS, needle1, needle2, NULL));
}

static uint64_t take_snapshot(hx_master *m)
{
    kvc *c = hx_client(m);
    assert_non_null(c);
    uint64_t seq = 0;
    assert_int_equal(kvc_snapshot(c, &seq), 0);
    assert_true(seq > 0);
    kvc_close(c);
    return seq;
}

/* -- fixture --------------------------------------------------------------------- */

static int setup(void **state)
{
    *state = calloc(1, sizeof(hx_master));
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    hx_cleanup(*state);
    free(*state);
    return 0;
}

/* -- torn tails ---------------------------------------------------------------------- */

static void put_five(hx_master *m, uint64_t seqs[5])
{
    char key[16], content[32];
    kvc *c = hx_client(m);
    assert_non_null(c);
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "k/%d", i);
        snprintf(content, sizeof(content), "content %d", i);
        put(c, key, content, &seqs[i]);
    }
    kvc_close(c);
}

static void assert_objects(hx_master *m, int from, int to)
{
    char key[16], content[32];
    kvc *c = hx_client(m);
    assert_non_null(c);
    for (int i = from; i < to; i++) {
        snprintf(key, sizeof(key), "k/%d", i);
        snprintf(content, sizeof(content), "content %d", i);
        assert_object(c, key, content);
    }
    kvc_close(c);
}

/* Garbage right after the last record is a torn tail: the master cuts it,
 * says so, and serves every acknowledged object; the log goes on from there. */
static void test_garbage_after_the_last_record_is_cut_and_every_object_served(void **state)
{
    hx_master *m = *state;
    uint64_t seqs[5];
    char seg[1024];
    assert_int_equal(hx_init(m, "torn-garbage", NULL), 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    put_five(m, seqs);
    assert_int_equal(hx_stop(m), 0);

    /* 37 bytes of a record that never became durable, right after the last
     * one: in the segment's unwritten space, or past the end of the file */
    last_segment(m, seg, sizeof(seg));
    size_t n = 0, len = 0;
    seg_rec *recs = segment_records(seg, &n);
    assert_true(n > 0);
    size_t end = recs[n - 1].off + REC_HDR + recs[n - 1].len + REC_SUM;
    free(recs);
    uint8_t *buf = read_whole(seg, &len);
    if (len < end + 37) buf = realloc(buf, end + 37);
    assert_non_null(buf);
    memset(buf + end, 0xa5, 37);
    write_whole(seg, buf, len > end + 37 ? len : end + 37);
    free(buf);

    assert_int_equal(hx_start(m, START_MS), 0);
    assert_true(hx_log_contains(m, "torn tail"));
    assert_true(hx_log_contains(m, "37 bytes after it were not zero"));
    assert_objects(m, 0, 5);
    kvc *c = hx_client(m);
    put(c, "k/after", "after the cut", NULL);
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);

    assert_int_equal(hx_start(m, START_MS), 0);
    assert_objects(m, 0, 5);
    c = hx_client(m);
    assert_object(c, "k/after", "after the cut");
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);
}

/* A last record cut in the middle of its payload is a torn tail: the master
 * cuts it and serves every object whose record is intact; the object of the
 * cut record is gone, nothing else. */
static void test_record_cut_mid_payload_is_cut_and_intact_objects_served(void **state)
{
    hx_master *m = *state;
    uint64_t seqs[5];
    char seg[1024];
    assert_int_equal(hx_init(m, "torn-cut", NULL), 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    put_five(m, seqs);
    assert_int_equal(hx_stop(m), 0);

    last_segment(m, seg, sizeof(seg));
    size_t n = 0;
    seg_rec *recs = segment_records(seg, &n);
    assert_true(n > 1);
    /* the put end of k/4, then the stop's WRITE_ZONES: cut in k/4's (the
     * zones' record, after it, goes with the torn tail) */
    seg_rec last = recs[n - 1];
    if (last.seq != seqs[4]) last = recs[n - 2];
    free(recs);
    assert_int_equal(last.seq, seqs[4]);
    assert_true(last.len > 2);
    assert_int_equal(truncate(seg, (off_t)(last.off + REC_HDR + last.len / 2)), 0);

    assert_int_equal(hx_start(m, START_MS), 0);
    assert_true(hx_log_contains(m, "torn tail"));
    assert_objects(m, 0, 4);
    kvc *c = hx_client(m);
    assert_absent(c, "k/4");
    put(c, "k/4", "content 4", NULL); /* the key is free again */
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);

    assert_int_equal(hx_start(m, START_MS), 0);
    assert_objects(m, 0, 5);
    assert_int_equal(hx_stop(m), 0);
}

/* -- damaged snapshot ------------------------------------------------------------ */

/* One flipped byte in the newest snapshot refuses the start with the file and
 * the damaged section named -- in the objects section, or after it, once
 * their load has started (master_recovery.c); nothing is loaded, deleted or
 * rewritten, and with the byte restored the master serves everything again. */
static void test_flipped_byte_in_snapshot_refuses_start_and_touches_nothing(void **state)
{
    hx_master *m = *state;
    char path[1024];
    assert_int_equal(hx_init(m, "snap-flip", NULL), 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    kvc *c = hx_client(m);
    put(c, "s/1", "before the snapshot", NULL);
    put(c, "s/2", "also before", NULL);
    kvc_close(c);
    uint64_t seq = take_snapshot(m);
    c = hx_client(m);
    put(c, "s/3", "after the snapshot", NULL);
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);

    /* Flip a byte in the middle of the host's objects section. */
    snapshot_path(m, seq, path, sizeof(path));
    snap_image *img = load_snapshot(path);
    const snap_section *objs = snap_image_section(img, "host_objects");
    assert_non_null(objs);
    assert_true(objs->len > 0);
    size_t len = 0;
    uint8_t *buf = read_whole(path, &len);
    uint8_t *at = memmem(buf, len, objs->data, objs->len);
    assert_non_null(at);
    size_t flip = (size_t)(at - buf) + objs->len / 2;
    snap_image_free(img);
    buf[flip] ^= 0x40;
    write_whole(path, buf, len);

    assert_start_refused(m, path, "section 'host_objects' checksum mismatch");
    buf[flip] ^= 0x40;

    /* A byte of the trailer: the objects section checks, so its load has
     * started by the time the rest of the file is refused. */
    buf[len - 1] ^= 0x40;
    write_whole(path, buf, len);
    assert_start_refused(m, path, "whole-file checksum mismatch");
    buf[len - 1] ^= 0x40;

    write_whole(path, buf, len);
    free(buf);
    assert_int_equal(hx_start(m, START_MS), 0);
    c = hx_client(m);
    assert_object(c, "s/1", "before the snapshot");
    assert_object(c, "s/2", "also before");
    assert_object(c, "s/3", "after the snapshot");
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);
}

/* Flip a byte in the middle of the host's objects section of snapshot
 * seq (its path into path). */
static void flip_objects_byte(const hx_master *m, uint64_t seq, char *path, size_t cap)
{
    snapshot_path(m, seq, path, cap);
    snap_image *img = load_snapshot(path);
    const snap_section *objs = snap_image_section(img, "host_objects");
    assert_non_null(objs);
    size_t len = 0;
    uint8_t *buf = read_whole(path, &len);
    uint8_t *at = memmem(buf, len, objs->data, objs->len);
    assert_non_null(at);
    at[objs->len / 2] ^= 0x40;
    snap_image_free(img);
    write_whole(path, buf, len);
    free(buf);
}

/* A damaged newest snapshot, an older one there and the OpLog holding every
 * record after the older one: the refusal names the older snapshot and
 * says the damaged one may be moved aside (the master does not fall back
 * by itself: the start is refused, nothing changed); moved aside, the
 * master starts from the older snapshot plus the log and serves every
 * object -- those put before, between and after the two snapshots. */
static void test_a_damaged_newest_snapshot_hints_at_the_older_one(void **state)
{
    hx_master *m = *state;
    char path[1024], older[1024], aside[1100], want[2600];
    assert_int_equal(hx_init(m, "snap-hint", NULL), 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    kvc *c = hx_client(m);
    put(c, "h/1", "before both", NULL);
    kvc_close(c);
    uint64_t first = take_snapshot(m);
    c = hx_client(m);
    put(c, "h/2", "between them", NULL);
    kvc_close(c);
    uint64_t second = take_snapshot(m);
    c = hx_client(m);
    put(c, "h/3", "after both", NULL);
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);

    flip_objects_byte(m, second, path, sizeof(path));
    snapshot_path(m, first, older, sizeof(older));
    snprintf(want, sizeof(want), "hint: the older snapshot %s (seq %llu) is there and the OpLog holds "
             "every record after it (from seq 1): moving %s aside (keep it) lets the master start "
             "from the older snapshot plus the log; it does not fall back by itself",
             older, (unsigned long long)first, path);
    assert_true(hx_start_refused(m, START_MS, "section 'host_objects' checksum mismatch", want, NULL));

    snprintf(aside, sizeof(aside), "%s/damaged.snap", m->dir);
    assert_int_equal(rename(path, aside), 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    c = hx_client(m);
    assert_object(c, "h/1", "before both");
    assert_object(c, "h/2", "between them");
    assert_object(c, "h/3", "after both");
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);
}

/* ... but when the OpLog no longer holds the records after the older
 * snapshot (its segments were dropped once the newer one was durable),
 * starting from the older one would lose them: no hint, the refusal as
 * before. */
static void test_no_hint_when_the_log_does_not_cover_the_older_snapshot(void **state)
{
    hx_master *m = *state;
    char path[1024], key[32];
    assert_int_equal(hx_init(m, "snap-nohint", "oplog:\n  segment_bytes: 4096\n  preallocate: false\n"), 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    kvc *c = hx_client(m);
    put(c, "n/0", "before both", NULL);
    kvc_close(c);
    take_snapshot(m);
    c = hx_client(m);
    for (int i = 1; i <= 200; i++) { /* several 4 KiB segments */
        snprintf(key, sizeof(key), "n/%d", i);
        put(c, key, "between them, a record of some length to roll segments", NULL);
    }
    kvc_close(c);
    uint64_t second = take_snapshot(m); /* drops the segments below it */
    assert_int_equal(hx_stop(m), 0);

    flip_objects_byte(m, second, path, sizeof(path));
    assert_true(hx_start_refused(m, START_MS, "section 'host_objects' checksum mismatch", NULL, "hint:"));
}

/* -- records and sections of a disabled plugin ---------------------------------- */

/* Records of the carried-records section: (seq, type) pairs, *n of them. */
static size_t carried_records(const snap_image *img, uint64_t *seqs, uint16_t *types, size_t max)
{
    const snap_section *s = snap_image_section(img, "host_carried_records");
    size_t off = 0, n = 0;
    if (s == NULL) return 0;
    while (off < s->len) {
        assert_true(s->len - off >= 16);
        uint32_t len = (uint32_t)le(s->data + off + 12, 4);
        assert_true(n < max);
        seqs[n] = le(s->data + off, 8);
        types[n] = (uint16_t)le(s->data + off + 8, 2);
        n++;
        off += 16 + len;
    }
    return n;
}

/* Records of a plugin that is disabled: the master starts with no extra
 * configuration and keeps them verbatim, through a snapshot and a restart;
 * when the plugin is back it gets exactly those records. The removed key
 * oplog.carry_unknown_types refuses the start, naming it, and changes
 * nothing. */
static void test_records_of_a_disabled_plugin_are_carried_then_replayed(void **state)
{
    hx_master *m = *state;
    char path[1024];
    assert_int_equal(hx_init(m, "carry", NULL), 0);
    configure(m, 1, RECORDER_ON, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    uint64_t seq_a = recorder_set(m, "A");
    uint64_t seq_b = recorder_set(m, "B");
    assert_true(seq_b > seq_a);
    assert_recorder_holds(m, "A,B");
    assert_int_equal(hx_stop(m), 0);

    /* The old key is refused, not ignored, whatever its value. */
    configure_with(m, 1, RECORDER_OFF, 0, "oplog:\n  carry_unknown_types: true\n");
    assert_start_refused(m, "oplog.carry_unknown_types: was removed", "delete this key");

    /* Disabled: the master starts; a snapshot keeps the records (the log
     * before it is no longer replayed), and a restart from it still starts. */
    configure(m, 1, RECORDER_OFF, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    kvc *c = hx_client(m);
    put(c, "plain/1", "a plain object meanwhile", NULL);
    kvc_close(c);
    uint64_t snap = take_snapshot(m);
    assert_true(snap > seq_b);
    assert_int_equal(hx_stop(m), 0);
    snapshot_path(m, snap, path, sizeof(path));
    snap_image *img = load_snapshot(path);
    uint64_t cseqs[4];
    uint16_t ctypes[4];
    assert_int_equal(carried_records(img, cseqs, ctypes, 4), 2);
    assert_int_equal(cseqs[0], seq_a);
    assert_int_equal(cseqs[1], seq_b);
    assert_int_equal(ctypes[0], RECORDER_TYPE);
    assert_int_equal(ctypes[1], RECORDER_TYPE);
    assert_null(snap_image_section(img, "recorder")); /* never loaded since */
    snap_image_free(img);

    assert_int_equal(hx_start(m, START_MS), 0);
    assert_int_equal(hx_stop(m), 0);

    /* Absent from the config altogether: the same. */
    char extra[1024];
    snprintf(extra, sizeof(extra), "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n", BUILD_DIR);
    assert_int_equal(hx_reconfigure(m, extra), 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    assert_int_equal(hx_stop(m), 0);

    /* The plugin is back: exactly A, B, replayed from the carried records. */
    configure(m, 1, RECORDER_ON, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    assert_recorder_holds(m, "A,B");
    recorder_set(m, "C");
    assert_recorder_holds(m, "A,B,C");
    take_snapshot(m);
    assert_int_equal(hx_stop(m), 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    assert_recorder_holds(m, "A,B,C");
    c = hx_client(m);
    assert_object(c, "plain/1", "a plain object meanwhile");
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);
}

static void assert_same_section(const snap_image *a, const snap_image *b, const char *name)
{
    const snap_section *sa = snap_image_section(a, name);
    const snap_section *sb = snap_image_section(b, name);
    if (sa == NULL || sb == NULL) fail_msg("section '%s' missing", name);
    assert_int_equal(sa->encver, sb->encver);
    assert_int_equal(sa->len, sb->len);
    assert_memory_equal(sa->data, sb->data, sa->len);
}

/* With both plugins disabled, a new snapshot carries the weight_metadata and
 * recorder sections byte for byte, and re-enabling the plugins restores
 * their state from them. */
static void test_sections_of_disabled_plugins_survive_a_snapshot_byte_for_byte(void **state)
{
    hx_master *m = *state;
    char path[1024];
    assert_int_equal(hx_init(m, "sections", NULL), 0);
    configure(m, 1, RECORDER_ON, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    recorder_set(m, "A");
    recorder_set(m, "B");
    uint64_t s1 = take_snapshot(m);
    assert_int_equal(hx_stop(m), 0);
    snapshot_path(m, s1, path, sizeof(path));
    snap_image *img1 = load_snapshot(path);
    const snap_section *rec1 = snap_image_section(img1, "recorder");
    assert_non_null(rec1);
    assert_true(rec1->len > 0);
    assert_non_null(snap_image_section(img1, "weight_metadata"));

    configure(m, 0, RECORDER_OFF, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    kvc *c = hx_client(m);
    put(c, "plain/1", "changes the host section", NULL);
    kvc_close(c);
    uint64_t s2 = take_snapshot(m);
    assert_true(s2 > s1);
    assert_int_equal(hx_stop(m), 0);
    snapshot_path(m, s2, path, sizeof(path));
    snap_image *img2 = load_snapshot(path);
    assert_same_section(img1, img2, "weight_metadata");
    assert_same_section(img1, img2, "recorder");

    /* And once more from a snapshot that only carried them. */
    assert_int_equal(hx_start(m, START_MS), 0);
    c = hx_client(m);
    put(c, "plain/2", "changes it again", NULL);
    kvc_close(c);
    uint64_t s3 = take_snapshot(m);
    assert_int_equal(hx_stop(m), 0);
    snapshot_path(m, s3, path, sizeof(path));
    snap_image *img3 = load_snapshot(path);
    assert_same_section(img1, img3, "weight_metadata");
    assert_same_section(img1, img3, "recorder");
    snap_image_free(img1);
    snap_image_free(img2);
    snap_image_free(img3);

    configure(m, 1, RECORDER_ON, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    assert_recorder_holds(m, "A,B");
    c = hx_client(m);
    assert_object(c, "plain/1", "changes the host section");
    assert_object(c, "plain/2", "changes it again");
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);
}

/* -- encoding versions ---------------------------------------------------------- */

/* A record written at encoding version 2 refuses the start of a build that
 * replays 1..1, naming the record's type and both versions; the build that
 * reads 2 starts and gets the record. */
static void test_record_encoded_newer_than_the_plugin_reads_refuses_start(void **state)
{
    hx_master *m = *state;
    char seg[1024], needle[160];
    assert_int_equal(hx_init(m, "encver", NULL), 0);
    configure(m, 1, RECORDER_ON, 2);
    assert_int_equal(hx_start(m, START_MS), 0);
    uint64_t seq = recorder_set(m, "A");
    assert_int_equal(hx_stop(m), 0);

    last_segment(m, seg, sizeof(seg));
    size_t n = 0;
    seg_rec *recs = segment_records(seg, &n);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (recs[i].seq != seq) continue;
        assert_int_equal(recs[i].type, RECORDER_TYPE);
        assert_int_equal(recs[i].encver, 2);
        found = 1;
    }
    free(recs);
    assert_true(found);

    configure(m, 1, RECORDER_ON, 1);
    snprintf(needle, sizeof(needle),
             "record %llu has type 20 (RECORDER_SET) encoding version 2, but recorder replays 1..1",
             (unsigned long long)seq);
    assert_start_refused(m, needle, NULL);

    configure(m, 1, RECORDER_ON, 2);
    assert_int_equal(hx_start(m, START_MS), 0);
    assert_recorder_holds(m, "A");
    assert_int_equal(hx_stop(m), 0);
}

/* -- host records ------------------------------------------------------------------ */

static void on_appended(void *arg, int status, uint64_t seq)
{
    (void)seq;
    *(int *)arg = status == 0 ? 1 : -1;
}

static int skip_record(void *arg, const oplog_record *rec)
{
    (void)arg;
    (void)rec;
    return 0;
}

/* Append one record to a stopped master's file OpLog, as a build that
 * writes it would; its sequence. */
static uint64_t append_offline(const hx_master *m, uint16_t type, uint16_t encver)
{
    uv_loop_t loop;
    char dir[512], err[256] = "";
    oplog *log = NULL;
    int done = 0;
    uint64_t seq = 0;
    assert_int_equal(uv_loop_init(&loop), 0);
    snprintf(dir, sizeof(dir), "%s/data/oplog", m->dir);
    oplog_file_options o = {.dir = dir};
    if (oplog_file_open(&loop, &o, &log, err, sizeof(err)) < 0) fail_msg("open: %s", err);
    uint64_t first = oplog_first_seq(log);
    if (oplog_replay(log, first > 0 ? first - 1 : 0, skip_record, NULL, err, sizeof(err)) < 0)
        fail_msg("replay: %s", err);
    assert_int_equal(oplog_append(log, type, encver, NULL, 0, on_appended, &done, &seq), 0);
    while (done == 0) uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(done, 1);
    oplog_close(log);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    return seq;
}

/* A host record at an encoding version this build does not replay (type 2
 * at version 3: PUT_REVOKE is 1, PUT_HANDOFF 2) refuses the start, naming
 * the record, its type and version. */
static void test_host_record_of_an_unknown_encoding_version_refuses_start(void **state)
{
    hx_master *m = *state;
    char needle[200];
    assert_int_equal(hx_init(m, "host-encver", NULL), 0);
    configure(m, 1, RECORDER_OFF, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    kvc *c = hx_client(m);
    assert_non_null(c);
    put(c, "kv/a", "A", NULL);
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);
    uint64_t seq = append_offline(m, 2, 3);
    snprintf(needle, sizeof(needle), "record %llu of host type 2 (PUT_REVOKE) at encoding "
             "version 3 does not apply", (unsigned long long)seq);
    assert_start_refused(m, needle, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_garbage_after_the_last_record_is_cut_and_every_object_served, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_record_cut_mid_payload_is_cut_and_intact_objects_served, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_flipped_byte_in_snapshot_refuses_start_and_touches_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_damaged_newest_snapshot_hints_at_the_older_one, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_no_hint_when_the_log_does_not_cover_the_older_snapshot,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_records_of_a_disabled_plugin_are_carried_then_replayed, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_sections_of_disabled_plugins_survive_a_snapshot_byte_for_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_record_encoded_newer_than_the_plugin_reads_refuses_start, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_host_record_of_an_unknown_encoding_version_refuses_start, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
