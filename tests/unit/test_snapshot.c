/* test_snapshot.c -- the snapshot file: round trips, carried sections,
 * damage and truncation detection, a section handed out early (whole, or
 * streamed before its bytes are all read), retention,
 * stale .tmp files, the async write on a libuv loop, and the builder's
 * refusals.
 *
 * Every test works on real files in its own mkdtemp() directory with real
 * fsyncs; damage is made by rewriting bytes of a file the module wrote. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>
#include <xxhash.h>

#include "snapshot.h"

/* ------------------------------------------------------------------------ */
/* Fixture and file helpers                                                  */
/* ------------------------------------------------------------------------ */

typedef struct fixture {
    char dir[64];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL) return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_snapshot-XXXXXX");
    if (mkdtemp(f->dir) == NULL) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    DIR *d = opendir(f->dir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char p[512];
            snprintf(p, sizeof(p), "%s/%s", f->dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

static void path_of(const fixture *f, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", f->dir, name);
}

static void snap_name(uint64_t seq, const char *suffix, char *out, size_t cap)
{
    snprintf(out, cap, "snapshot-%020" PRIu64 "%s", seq, suffix);
}

/* Read a whole file; the caller frees. */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    long n = ftell(fp);
    assert_true(n >= 0);
    rewind(fp);
    uint8_t *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

static void spill(const char *path, const void *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    if (len > 0) assert_int_equal(fwrite(buf, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

/* Write orig (len bytes) to path with bit 2 of byte off flipped. */
static void spill_flipped(const char *path, const uint8_t *orig, size_t len, size_t off)
{
    uint8_t *bad = malloc(len);
    assert_non_null(bad);
    memcpy(bad, orig, len);
    bad[off] ^= 0x04;
    spill(path, bad, len);
    free(bad);
}

/* A byte to damage and what the refusal must then name. */
typedef struct damage_case {
    size_t off;
    const char *what;
} damage_case;

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Number of directory entries other than . and .. */
static int count_entries(const fixture *f)
{
    int n = 0;
    DIR *d = opendir(f->dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

/* ------------------------------------------------------------------------ */
/* A sample snapshot                                                         */
/* ------------------------------------------------------------------------ */

#define BIG_LEN 10000

typedef struct sample_sec {
    const char *name;
    uint16_t encver;
    size_t len;
} sample_sec;

/* In file order: empty sections first, in the middle and last. */
static const sample_sec SAMPLE[] = {
    {"empty_first", 5, 0},
    {"host_objects", 1, 37},
    {"weight_metadata", 2, BIG_LEN},
    {"nodes", 1, 0},
    {"future_plugin", 9, 3},
    {"empty_last", 7, 0},
};
#define N_SAMPLE (sizeof(SAMPLE) / sizeof(SAMPLE[0]))

static uint8_t sample_byte(size_t sec, size_t i)
{
    return (uint8_t)(i * 31 + sec * 7 + (i >> 8));
}

/* Build the sample: sections 0..2 through writers (the big one in uneven
 * chunks, the empty one with no write at all), the rest with add_raw. */
static snap_builder *build_sample(uint64_t seq)
{
    snap_builder *b = snap_builder_new(seq);
    assert_non_null(b);
    for (size_t s = 0; s < N_SAMPLE; s++) {
        uint8_t *bytes = malloc(SAMPLE[s].len + 1);
        assert_non_null(bytes);
        for (size_t i = 0; i < SAMPLE[s].len; i++) bytes[i] = sample_byte(s, i);
        if (s < 3) {
            smp_writer *w = NULL;
            assert_int_equal(snap_builder_begin_section(b, SAMPLE[s].name, SAMPLE[s].encver, &w),
                             SMP_OK);
            size_t off = 0, step = 1;
            while (off < SAMPLE[s].len) {
                size_t n = SAMPLE[s].len - off < step ? SAMPLE[s].len - off : step;
                assert_int_equal(snap_writer_write(w, bytes + off, n), SMP_OK);
                off += n;
                step = step * 3 + 1;
            }
            assert_int_equal(snap_writer_write(w, NULL, 0), SMP_OK);
            assert_int_equal(snap_builder_end_section(b), SMP_OK);
        } else {
            assert_int_equal(snap_builder_add_raw(b, SAMPLE[s].name, SAMPLE[s].encver,
                                                  SAMPLE[s].len ? bytes : NULL, SAMPLE[s].len),
                             SMP_OK);
        }
        free(bytes);
    }
    return b;
}

static void write_sample(const fixture *f, uint64_t seq, uint32_t keep, char *path, size_t cap)
{
    snap_builder *b = build_sample(seq);
    assert_int_equal(snap_write_file(b, f->dir, keep, path, cap), SMP_OK);
    snap_builder_free(b);
}

static void assert_sample(const snap_image *img, uint64_t seq)
{
    assert_int_equal(snap_image_last_seq(img), seq);
    assert_int_equal(snap_image_count(img), N_SAMPLE);
    for (size_t s = 0; s < N_SAMPLE; s++) {
        const snap_section *sec = snap_image_section_at(img, s);
        assert_non_null(sec);
        assert_string_equal(sec->name, SAMPLE[s].name);
        assert_int_equal(sec->encver, SAMPLE[s].encver);
        assert_int_equal(sec->len, SAMPLE[s].len);
        assert_non_null(sec->data);
        for (size_t i = 0; i < sec->len; i++) assert_int_equal(sec->data[i], sample_byte(s, i));
        assert_ptr_equal(snap_image_section(img, SAMPLE[s].name), sec);
    }
    assert_null(snap_image_section_at(img, N_SAMPLE));
}

/* Offset in the file of section i's frame, from the documented layout. */
static size_t frame_offset(size_t i)
{
    size_t off = 32;
    for (size_t s = 0; s < i; s++) off += 32 + strlen(SAMPLE[s].name) + SAMPLE[s].len;
    return off;
}

/* Load dir's newest snapshot expecting a refusal whose message names the
 * file and contains what. */
static void assert_refused(const fixture *f, const char *file, const char *what)
{
    char err[512] = "";
    snap_image *img = (snap_image *)&err; /* must be overwritten with NULL */
    int rc = snap_load_newest(f->dir, &img, err, sizeof(err));
    assert_int_equal(rc, SMP_EPROTO);
    assert_null(img);
    if (strstr(err, file) == NULL || strstr(err, what) == NULL)
        fail_msg("message \"%s\" does not name \"%s\" and \"%s\"", err, file, what);
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                               */
/* ------------------------------------------------------------------------ */

/* Every section comes back with its name, encver and bytes, in order,
 * including empty ones wherever they sit. */
static void test_round_trip_keeps_every_section_in_order(void **state)
{
    fixture *f = *state;
    char path[512], expect[512], name[64], err[256] = "";
    write_sample(f, 1234, 3, path, sizeof(path));
    snap_name(1234, ".snap", name, sizeof(name));
    path_of(f, name, expect, sizeof(expect));
    assert_string_equal(path, expect);

    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    assert_non_null(img);
    assert_string_equal(snap_image_path(img), expect);
    assert_sample(img, 1234);
    snap_image_free(img);

    assert_int_equal(snap_load_file(expect, &img, err, sizeof(err)), SMP_OK);
    assert_sample(img, 1234);
    snap_image_free(img);
}

/* A snapshot without sections, at sequence 0, is a valid snapshot. */
static void test_empty_snapshot_round_trips(void **state)
{
    fixture *f = *state;
    char err[256];
    snap_builder *b = snap_builder_new(0);
    assert_int_equal(snap_write_file(b, f->dir, 1, NULL, 0), SMP_OK);
    snap_builder_free(b);
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    assert_int_equal(snap_image_last_seq(img), 0);
    assert_int_equal(snap_image_count(img), 0);
    assert_null(snap_image_section(img, "host_objects"));
    snap_image_free(img);
}

/* A reader over a present section gives its bytes; over a missing one, an
 * empty but non-NULL buffer (what a plugin's load() receives). */
static void test_reader_gives_section_bytes_and_empty_for_missing(void **state)
{
    fixture *f = *state;
    char err[256];
    write_sample(f, 7, 1, NULL, 0);
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);

    smp_reader r;
    const uint8_t *data = NULL;
    size_t len = 99;
    snap_reader_init(&r, snap_image_section(img, "host_objects"));
    snap_reader_data(&r, &data, &len);
    assert_int_equal(len, 37);
    assert_int_equal(data[36], sample_byte(1, 36));

    snap_reader_init(&r, snap_image_section(img, "no_such_section"));
    data = NULL;
    snap_reader_data(&r, &data, &len);
    assert_non_null(data);
    assert_int_equal(len, 0);

    snap_reader_init(&r, snap_image_section(img, "empty_first"));
    data = NULL;
    snap_reader_data(&r, &data, &len);
    assert_non_null(data);
    assert_int_equal(len, 0);
    snap_image_free(img);
}

/* A section no plugin claims is carried into the next snapshot byte for
 * byte -- body, encver and its whole frame -- while the claimed sections are
 * saved afresh. */
static void test_carried_section_survives_load_rebuild_write_load(void **state)
{
    fixture *f = *state;
    char p1[512], p2[512], err[256];
    write_sample(f, 100, 2, p1, sizeof(p1));

    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    /* The master's rebuild: its own and the loaded plugins' sections are saved
     * anew; everything else is carried from the image. */
    const char *claimed[] = {"host_objects", "weight_metadata"};
    snap_builder *b = snap_builder_new(200);
    for (size_t c = 0; c < 2; c++) {
        smp_writer *w;
        assert_int_equal(snap_builder_begin_section(b, claimed[c], 3, &w), SMP_OK);
        assert_int_equal(snap_writer_write(w, "fresh", 5), SMP_OK);
        assert_int_equal(snap_builder_end_section(b), SMP_OK);
    }
    for (size_t i = 0; i < snap_image_count(img); i++) {
        const snap_section *s = snap_image_section_at(img, i);
        if (strcmp(s->name, "host_objects") == 0 || strcmp(s->name, "weight_metadata") == 0)
            continue;
        assert_int_equal(snap_builder_add_raw(b, s->name, s->encver, s->data, s->len), SMP_OK);
    }
    assert_int_equal(snap_write_file(b, f->dir, 2, p2, sizeof(p2)), SMP_OK);
    snap_builder_free(b);

    snap_image *img2 = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img2, err, sizeof(err)), SMP_OK);
    assert_int_equal(snap_image_last_seq(img2), 200);
    assert_int_equal(snap_image_count(img2), N_SAMPLE);
    for (size_t s = 0; s < N_SAMPLE; s++) {
        const snap_section *old = snap_image_section(img, SAMPLE[s].name);
        const snap_section *now = snap_image_section(img2, SAMPLE[s].name);
        assert_non_null(now);
        if (strcmp(SAMPLE[s].name, "host_objects") == 0 ||
            strcmp(SAMPLE[s].name, "weight_metadata") == 0) {
            assert_int_equal(now->len, 5);
            assert_memory_equal(now->data, "fresh", 5);
            continue;
        }
        assert_int_equal(now->encver, old->encver);
        assert_int_equal(now->len, old->len);
        if (now->len) assert_memory_equal(now->data, old->data, now->len);
    }

    /* The carried frame (frame, name, body) appears verbatim in the new file. */
    size_t n1, n2;
    uint8_t *f1 = slurp(p1, &n1), *f2 = slurp(p2, &n2);
    size_t off = frame_offset(4), flen = 32 + strlen("future_plugin") + 3;
    assert_string_equal(SAMPLE[4].name, "future_plugin");
    assert_non_null(memmem(f2, n2, f1 + off, flen));
    free(f1);
    free(f2);
    snap_image_free(img2);
    snap_image_free(img);
}

/* ------------------------------------------------------------------------ */
/* Damage and truncation                                                     */
/* ------------------------------------------------------------------------ */

/* One flipped byte in the header, a section name, a section body or the
 * trailer is refused with a message naming the file and the region. */
static void test_flipped_byte_in_each_region_is_refused(void **state)
{
    fixture *f = *state;
    char path[512], name[64];
    write_sample(f, 1234, 1, path, sizeof(path));
    snap_name(1234, ".snap", name, sizeof(name));
    size_t len;
    uint8_t *orig = slurp(path, &len);

    damage_case cases[] = {
        {0, "header"},                                   /* magic */
        {9, "header"},                                   /* format version */
        {17, "header"},                                  /* last seq */
        {frame_offset(2) + 32 + 3, "section #2 frame"},  /* the name "weight_metadata" */
        {frame_offset(2) + 9, "section #2 frame"},       /* its length */
        {frame_offset(2) + 32 + 15 + 5000, "section 'weight_metadata' checksum"},
        {frame_offset(1) + 32 + 12, "section 'host_objects' checksum"},
        {len - 20, "trailer"},                           /* magic */
        {len - 12, "trailer"},                           /* file length */
        {len - 3, "trailer"},                            /* whole-file checksum */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        spill_flipped(path, orig, len, cases[c].off);
        assert_refused(f, name, cases[c].what);
    }
    spill(path, orig, len);
    snap_image *img = NULL;
    char err[256];
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    snap_image_free(img);
    free(orig);
}

/* Exhaustively: whichever single byte is damaged, the file is refused. */
static void test_every_single_byte_flip_is_refused(void **state)
{
    fixture *f = *state;
    char path[512], err[512];
    snap_builder *b = snap_builder_new(42);
    assert_int_equal(snap_builder_add_raw(b, "a", 1, "xyz", 3), SMP_OK);
    assert_int_equal(snap_builder_add_raw(b, "empty", 2, NULL, 0), SMP_OK);
    assert_int_equal(snap_builder_add_raw(b, "weight_metadata", 3, "0123456789", 10), SMP_OK);
    assert_int_equal(snap_write_file(b, f->dir, 1, path, sizeof(path)), SMP_OK);
    snap_builder_free(b);
    size_t len;
    uint8_t *orig = slurp(path, &len);
    uint8_t *bad = malloc(len);
    assert_non_null(bad);
    for (size_t off = 0; off < len; off++) {
        for (int bit = 0; bit < 8; bit += 7) {
            memcpy(bad, orig, len);
            bad[off] ^= (uint8_t)(1u << bit);
            spill(path, bad, len);
            snap_image *img = (snap_image *)bad;
            int rc = snap_load_file(path, &img, err, sizeof(err));
            if (rc != SMP_EPROTO) fail_msg("flip of bit %d at %zu: rc %d", bit, off, rc);
            assert_null(img);
            assert_non_null(strstr(err, "snapshot-00000000000000000042.snap"));
        }
    }
    free(bad);
    free(orig);
}

/* A file cut anywhere -- or with bytes appended -- is refused. */
static void test_truncation_at_any_point_is_refused(void **state)
{
    fixture *f = *state;
    char path[512], err[512];
    write_sample(f, 55, 1, path, sizeof(path));
    size_t len;
    uint8_t *orig = slurp(path, &len);
    size_t step = 1;
    for (size_t cut = 0; cut < len; cut += step) {
        /* Every byte of the frames and ends; strides through the big body. */
        step = (cut > frame_offset(2) + 64 && cut < frame_offset(3) - 64) ? 97 : 1;
        spill(path, orig, cut);
        snap_image *img = (snap_image *)orig;
        int rc = snap_load_newest(f->dir, &img, err, sizeof(err));
        if (rc != SMP_EPROTO) fail_msg("cut at %zu of %zu: rc %d", cut, len, rc);
        assert_null(img);
        assert_non_null(strstr(err, "snapshot-00000000000000000055.snap"));
    }
    uint8_t *longer = malloc(len + 5);
    assert_non_null(longer);
    memcpy(longer, orig, len);
    memcpy(longer + len, "junk!", 5);
    spill(path, longer, len + 5);
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_EPROTO);
    assert_null(img);
    free(longer);
    free(orig);
}

/* Recompute the whole-file checksum at the end of buf. */
static void fix_trailer(uint8_t *buf, size_t len)
{
    uint64_t h = XXH64(buf, len - 8, 0);
    for (size_t i = 0; i < 8; i++) buf[len - 8 + i] = (uint8_t)(h >> (8 * i));
}

/* Rewrite a header field of the file at path and fix every checksum over it,
 * as a buggy or hostile writer would. */
static void forge_header(const char *path, size_t field, uint64_t v, size_t width)
{
    size_t len;
    uint8_t *buf = slurp(path, &len);
    for (size_t i = 0; i < width; i++) buf[field + i] = (uint8_t)(v >> (8 * i));
    uint64_t h = XXH64(buf, 24, 0);
    for (size_t i = 0; i < 8; i++) buf[24 + i] = (uint8_t)(h >> (8 * i));
    fix_trailer(buf, len);
    spill(path, buf, len);
    free(buf);
}

/* Lengths and counts that pass their own checksum but exceed the file are
 * refused with a message, without trusting them for an allocation. */
static void test_forged_lengths_and_counts_are_refused(void **state)
{
    fixture *f = *state;
    char path[512], name[64];
    snap_name(77, ".snap", name, sizeof(name));

    write_sample(f, 77, 1, path, sizeof(path));
    forge_header(path, 12, 0xffffffffu, 4);
    assert_refused(f, name, "more than the limit");

    unlink(path);
    write_sample(f, 77, 1, path, sizeof(path));
    forge_header(path, 12, N_SAMPLE + 1, 4);
    assert_refused(f, name, "section #6");

    /* One section fewer than the file holds: the last one is left over. */
    unlink(path);
    write_sample(f, 77, 1, path, sizeof(path));
    forge_header(path, 12, N_SAMPLE - 1, 4);
    assert_refused(f, name, "unexpected bytes");

    /* The trailer's length field disagrees (its checksum made to agree). */
    unlink(path);
    write_sample(f, 77, 1, path, sizeof(path));
    {
        size_t n;
        uint8_t *t = slurp(path, &n);
        t[n - 16] ^= 0x01;
        fix_trailer(t, n);
        spill(path, t, n);
        free(t);
    }
    assert_refused(f, name, "trailer records");

    unlink(path);
    write_sample(f, 77, 1, path, sizeof(path));
    forge_header(path, 8, 2, 4);
    assert_refused(f, name, "format version 2");

    unlink(path);
    write_sample(f, 77, 1, path, sizeof(path));
    forge_header(path, 16, 78, 8);
    assert_refused(f, name, "does not match the file name");

    /* A section body length of 2^62 with a valid frame checksum. */
    unlink(path);
    write_sample(f, 77, 1, path, sizeof(path));
    size_t len;
    uint8_t *buf = slurp(path, &len);
    uint8_t *fr = buf + frame_offset(1);
    uint64_t huge = UINT64_C(1) << 62;
    for (size_t i = 0; i < 8; i++) fr[8 + i] = (uint8_t)(huge >> (8 * i));
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, fr, 24);
    XXH64_update(st, fr + 32, strlen("host_objects"));
    uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    for (size_t i = 0; i < 8; i++) fr[24 + i] = (uint8_t)(h >> (8 * i));
    fix_trailer(buf, len);
    spill(path, buf, len);
    free(buf);
    assert_refused(f, name, "section 'host_objects' length 4611686018427387904 runs past");
}

/* The newest snapshot damaged and an older valid one beside it: refused,
 * never a silent fall back to the older one. */
static void test_corrupt_newest_is_refused_even_with_older_valid(void **state)
{
    fixture *f = *state;
    char older[512], newer[512], name[64], err[256];
    write_sample(f, 10, 5, older, sizeof(older));
    write_sample(f, 20, 5, newer, sizeof(newer));
    size_t len;
    uint8_t *buf = slurp(newer, &len);
    buf[frame_offset(2) + 32 + 15 + 1] ^= 0xff;
    spill(newer, buf, len);
    free(buf);
    snap_name(20, ".snap", name, sizeof(name));
    assert_refused(f, name, "section 'weight_metadata' checksum mismatch");
    assert_true(file_exists(older));

    /* Loading the older file explicitly still works (an operator's choice). */
    snap_image *img = NULL;
    assert_int_equal(snap_load_file(older, &img, err, sizeof(err)), SMP_OK);
    assert_sample(img, 10);
    snap_image_free(img);
}

/* ------------------------------------------------------------------------ */
/* The directory                                                             */
/* ------------------------------------------------------------------------ */

/* keep=2 leaves only the two newest snapshots. */
static void test_keep_two_leaves_the_two_newest(void **state)
{
    fixture *f = *state;
    char p[512], name[64], err[256];
    uint64_t seqs[] = {3, 9, 10, 11, 500};
    for (size_t i = 0; i < 5; i++) write_sample(f, seqs[i], 2, NULL, 0);
    assert_int_equal(count_entries(f), 2);
    for (size_t i = 0; i < 5; i++) {
        snap_name(seqs[i], ".snap", name, sizeof(name));
        path_of(f, name, p, sizeof(p));
        assert_int_equal(file_exists(p), i >= 3);
    }
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    assert_int_equal(snap_image_last_seq(img), 500);
    snap_image_free(img);
}

/* A .tmp left by a crashed write is never loaded, even when its sequence is
 * the highest; load removes it. */
static void test_stale_tmp_is_ignored_and_removed_by_load(void **state)
{
    fixture *f = *state;
    char tmp[512], name[64], err[256];
    write_sample(f, 10, 2, NULL, 0);
    snap_name(99, ".snap.tmp", name, sizeof(name));
    path_of(f, name, tmp, sizeof(tmp));
    spill(tmp, "half a snapshot", 15);

    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    assert_int_equal(snap_image_last_seq(img), 10);
    snap_image_free(img);
    assert_false(file_exists(tmp));
}

/* The next write removes a leftover .tmp, including one with its own name. */
static void test_stale_tmp_is_removed_by_next_write(void **state)
{
    fixture *f = *state;
    char tmp_other[512], tmp_same[512], name[64], err[256];
    snap_name(5, ".snap.tmp", name, sizeof(name));
    path_of(f, name, tmp_other, sizeof(tmp_other));
    spill(tmp_other, "x", 1);
    snap_name(30, ".snap.tmp", name, sizeof(name));
    path_of(f, name, tmp_same, sizeof(tmp_same));
    spill(tmp_same, "y", 1);

    write_sample(f, 30, 2, NULL, 0);
    assert_false(file_exists(tmp_other));
    assert_false(file_exists(tmp_same));
    assert_int_equal(count_entries(f), 1);
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    assert_sample(img, 30);
    snap_image_free(img);
}

/* While another writer holds the directory, a write is refused (EBUSY) and
 * load leaves that writer's .tmp alone. */
static void test_second_writer_is_busy_and_its_tmp_is_spared(void **state)
{
    fixture *f = *state;
    char tmp[512], name[64], err[256];
    int dfd = open(f->dir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    assert_int_equal(flock(dfd, LOCK_EX | LOCK_NB), 0);

    snap_builder *b = build_sample(8);
    assert_int_equal(snap_write_file(b, f->dir, 1, NULL, 0), SMP_EBUSY);
    snap_name(9, ".snap.tmp", name, sizeof(name));
    path_of(f, name, tmp, sizeof(tmp));
    spill(tmp, "in progress", 11);
    snap_image *img = (snap_image *)b;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_ENOTFOUND);
    assert_null(img);
    assert_true(file_exists(tmp));

    close(dfd);
    assert_int_equal(snap_write_file(b, f->dir, 1, NULL, 0), SMP_OK);
    assert_false(file_exists(tmp));
    snap_builder_free(b);
}

/* No snapshot at all (an empty directory, or only a .tmp): SMP_ENOTFOUND and
 * *out NULL; a missing directory is an I/O error, not an empty start. */
static void test_no_snapshot_is_not_found(void **state)
{
    fixture *f = *state;
    char err[256] = "", tmp[512], name[64], missing[512];
    snap_image *img = (snap_image *)f;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_ENOTFOUND);
    assert_null(img);

    snap_name(4, ".snap.tmp", name, sizeof(name));
    path_of(f, name, tmp, sizeof(tmp));
    spill(tmp, "z", 1);
    path_of(f, "snapshot-12.snap", missing, sizeof(missing)); /* not 20 digits */
    spill(missing, "not ours", 8);
    img = (snap_image *)f;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_ENOTFOUND);
    assert_null(img);

    path_of(f, "no_such_dir", missing, sizeof(missing));
    img = (snap_image *)f;
    assert_int_equal(snap_load_newest(missing, &img, err, sizeof(err)), SMP_EIO);
    assert_null(img);
    assert_non_null(strstr(err, "no_such_dir"));
    snap_builder *b = snap_builder_new(1);
    assert_int_equal(snap_write_file(b, missing, 1, NULL, 0), SMP_EIO);
    snap_builder_free(b);
}

/* A snapshot never replaces one of the same sequence nor lands behind a
 * newer one. */
static void test_same_or_older_sequence_is_refused(void **state)
{
    fixture *f = *state;
    char path[512], err[256];
    write_sample(f, 50, 3, path, sizeof(path));
    snap_builder *b = snap_builder_new(50);
    assert_int_equal(snap_write_file(b, f->dir, 3, NULL, 0), SMP_EEXIST);
    snap_builder_free(b);
    b = snap_builder_new(49);
    assert_int_equal(snap_write_file(b, f->dir, 3, NULL, 0), SMP_EEXIST);
    snap_builder_free(b);
    assert_int_equal(count_entries(f), 1);
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    assert_sample(img, 50);
    snap_image_free(img);
}

/* A write that fails midway (here: the file size limit, standing in for a
 * full disk) reports the error and leaves neither a .tmp nor a new
 * snapshot; the previous snapshot is still the newest. */
static void test_failed_write_leaves_no_trace(void **state)
{
    fixture *f = *state;
    char err[256];
    write_sample(f, 60, 3, NULL, 0);

    struct rlimit old, small;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small = old;
    small.rlim_cur = 4096; /* the sample is about 10 KB */
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    snap_builder *b = build_sample(61);
    int rc = snap_write_file(b, f->dir, 3, NULL, 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, SMP_EIO);
    snap_builder_free(b);

    assert_int_equal(count_entries(f), 1);
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    assert_sample(img, 60);
    snap_image_free(img);
}

/* A path buffer too small is refused before anything is written. */
static void test_small_path_buffer_writes_nothing(void **state)
{
    fixture *f = *state;
    char small[16];
    snap_builder *b = build_sample(3);
    assert_int_equal(snap_write_file(b, f->dir, 1, small, sizeof(small)), SMP_ERANGE);
    assert_int_equal(snap_write_file(b, f->dir, 0, NULL, 0), SMP_EINVAL);
    snap_builder_free(b);
    assert_int_equal(count_entries(f), 0);
}

/* snap_file_path names the file snap_write_file writes (the master reports
 * it for a snapshot its forked writer made), and refuses a buffer too small
 * for it. */
static void test_file_path_is_the_written_file(void **state)
{
    fixture *f = *state;
    char written[512], named[512], small[16];
    snap_builder *b = build_sample(3);
    assert_int_equal(snap_write_file(b, f->dir, 1, written, sizeof(written)), SMP_OK);
    assert_int_equal(snap_file_path(f->dir, 3, named, sizeof(named)), SMP_OK);
    assert_string_equal(named, written);
    assert_int_equal(snap_file_path(f->dir, 3, small, sizeof(small)), SMP_ERANGE);
    assert_int_equal(snap_file_path(NULL, 3, named, sizeof(named)), SMP_EINVAL);
    snap_builder_free(b);
}

/* The file /proc/self/maps names for the mapping holding addr, into path
 * ("" when none or it is anonymous). */
static void mapping_of(const void *addr, char *path, size_t cap)
{
    char line[1024];
    uintptr_t a = (uintptr_t)addr;
    path[0] = '\0';
    FILE *m = fopen("/proc/self/maps", "r");
    assert_non_null(m);
    while (fgets(line, sizeof(line), m)) {
        uintptr_t lo, hi;
        int at = 0;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %*s %*s %*s %n", &lo, &hi, &at) < 2 ||
            a < lo || a >= hi)
            continue;
        snprintf(path, cap, "%s", at ? line + at : "");
        path[strcspn(path, "\n")] = '\0';
        break;
    }
    fclose(m);
}

/* A loaded image's sections are the file's own pages, mapped read-only:
 * no copy of the file in memory of the process's own (a snapshot of a
 * large store is hundreds of MB), the bytes the same as written, and the
 * pages gone with the image. */
static void test_loaded_sections_are_the_file_mapped(void **state)
{
    fixture *f = *state;
    char written[512], where[1024];
    snap_builder *b = build_sample(4);
    assert_int_equal(snap_write_file(b, f->dir, 1, written, sizeof(written)), SMP_OK);
    snap_builder_free(b);
    snap_image *img = NULL;
    char err[512] = "";
    assert_int_equal(snap_load_file(written, &img, err, sizeof(err)), SMP_OK);
    assert_true(snap_image_count(img) > 0);
    for (size_t i = 0; i < snap_image_count(img); i++) {
        const snap_section *s = snap_image_section_at(img, i);
        if (s->len == 0) continue;
        mapping_of(s->data, where, sizeof(where));
        assert_string_equal(where, written);
    }
    const uint8_t *first = snap_image_section_at(img, 0)->data;
    snap_image_free(img);
    mapping_of(first, where, sizeof(where));
    assert_string_not_equal(where, written);
}

/* The byte at i of the large sections below. */
static uint8_t big_byte(size_t i, uint8_t salt)
{
    return (uint8_t)(i * 31 + (i >> 11) + salt);
}

/* Sections written through the writer in pieces of many sizes grow past
 * the point where their buffer becomes a mapping (1 MiB) and on through
 * mremap (26 MiB here), one after another through the same writer, with a
 * small one between them: the file holds every byte in order, each section
 * loads back byte for byte. A section that failed (a write refused after
 * some 3 MiB) leaves nothing behind and the next one is written. */
static void test_large_sections_written_in_pieces_round_trip(void **state)
{
    fixture *f = *state;
    char path[512], err[512] = "";
    const size_t big[2] = {((size_t)26 << 20) + 123, ((size_t)5 << 20) + 7};
    const char *names[2] = {"big_one", "big_two"};
    snap_builder *b = snap_builder_new(9);
    assert_non_null(b);
    smp_writer *w = NULL;
    uint8_t *piece = malloc(70001);
    assert_non_null(piece);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(snap_builder_begin_section(b, names[k], 1, &w), SMP_OK);
        for (size_t at = 0, step = 1; at < big[k]; step = step * 7 % 70001 + 1) {
            size_t n = big[k] - at < step ? big[k] - at : step;
            for (size_t i = 0; i < n; i++) piece[i] = big_byte(at + i, (uint8_t)k);
            assert_int_equal(snap_writer_write(w, piece, n), SMP_OK);
            at += n;
        }
        assert_int_equal(snap_builder_end_section(b), SMP_OK);
        if (k == 0) {
            assert_int_equal(snap_builder_begin_section(b, "small", 1, &w), SMP_OK);
            assert_int_equal(snap_writer_write(w, "between", 7), SMP_OK);
            assert_int_equal(snap_builder_end_section(b), SMP_OK);
            assert_int_equal(snap_builder_begin_section(b, "failed", 1, &w), SMP_OK);
            for (int i = 0; i < 48; i++) assert_int_equal(snap_writer_write(w, piece, 65536), SMP_OK);
            assert_int_equal(snap_writer_write(w, NULL, 1), SMP_EINVAL);
            assert_int_equal(snap_builder_end_section(b), SMP_EINVAL);
        }
    }
    free(piece);
    assert_int_equal(snap_write_file(b, f->dir, 1, path, sizeof(path)), SMP_OK);
    snap_builder_free(b);

    snap_image *img = NULL;
    assert_int_equal(snap_load_file(path, &img, err, sizeof(err)), SMP_OK);
    assert_int_equal(snap_image_count(img), 3);
    assert_null(snap_image_section(img, "failed"));
    const snap_section *small = snap_image_section(img, "small");
    assert_non_null(small);
    assert_int_equal(small->len, 7);
    assert_memory_equal(small->data, "between", 7);
    for (int k = 0; k < 2; k++) {
        const snap_section *s = snap_image_section(img, names[k]);
        assert_non_null(s);
        assert_int_equal(s->len, big[k]);
        size_t bad = 0;
        for (size_t i = 0; i < s->len; i++) bad += s->data[i] != big_byte(i, (uint8_t)k);
        assert_int_equal(bad, 0);
    }
    assert_string_equal(snap_image_section_at(img, 0)->name, "big_one");
    assert_string_equal(snap_image_section_at(img, 2)->name, "big_two");
    snap_image_free(img);
}

/* ------------------------------------------------------------------------ */
/* Builder refusals                                                          */
/* ------------------------------------------------------------------------ */

/* The writer and reader functions slot straight into the ABI's host API
 * table (a signature drift would not compile), and a plugin's save() and
 * load() driven through that table see the same bytes. */
static int save_through_api(void *plugin, smp_writer *w)
{
    const smp_host_api *api = plugin;
    int rc = api->writer_write(w, "abc", 3);
    return rc < 0 ? rc : api->writer_write(w, "def", 3);
}

static void test_writer_and_reader_fit_the_host_api(void **state)
{
    fixture *f = *state;
    char err[256];
    smp_host_api api;
    memset(&api, 0, sizeof(api));
    api.writer_write = snap_writer_write;
    api.reader_data = snap_reader_data;

    snap_builder *b = snap_builder_new(11);
    smp_writer *w;
    assert_int_equal(snap_builder_begin_section(b, "weight_metadata", 1, &w), SMP_OK);
    assert_int_equal(save_through_api(&api, w), SMP_OK);
    assert_int_equal(snap_builder_end_section(b), SMP_OK);
    assert_int_equal(snap_write_file(b, f->dir, 1, NULL, 0), SMP_OK);
    snap_builder_free(b);

    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    smp_reader r;
    const uint8_t *data;
    size_t len;
    snap_reader_init(&r, snap_image_section(img, "weight_metadata"));
    api.reader_data(&r, &data, &len);
    assert_int_equal(len, 6);
    assert_memory_equal(data, "abcdef", 6);
    snap_image_free(img);
}

/* Two sections of one name in one builder are refused, however added. */
static void test_duplicate_section_names_are_refused(void **state)
{
    (void)state;
    smp_writer *w = NULL;
    snap_builder *b = snap_builder_new(1);
    assert_int_equal(snap_builder_begin_section(b, "weight_metadata", 1, &w), SMP_OK);
    assert_int_equal(snap_builder_end_section(b), SMP_OK);
    assert_int_equal(snap_builder_begin_section(b, "weight_metadata", 1, &w), SMP_EEXIST);
    assert_int_equal(snap_builder_add_raw(b, "weight_metadata", 2, "x", 1), SMP_EEXIST);
    assert_int_equal(snap_builder_add_raw(b, "carried", 2, "x", 1), SMP_OK);
    assert_int_equal(snap_builder_begin_section(b, "carried", 1, &w), SMP_EEXIST);
    assert_int_equal(snap_builder_add_raw(b, "carried", 1, NULL, 0), SMP_EEXIST);
    snap_builder_free(b);
}

/* Names must be 1..64 printable bytes; misuse of the open/close protocol is
 * SMP_ESTATE; a failed write discards its section instead of keeping it
 * short. */
static void test_bad_names_and_misuse_are_refused(void **state)
{
    fixture *f = *state;
    char name64[65], name65[66];
    memset(name64, 'n', 64);
    name64[64] = '\0';
    memset(name65, 'n', 65);
    name65[65] = '\0';
    smp_writer *w = NULL;
    snap_builder *b = snap_builder_new(1);
    assert_int_equal(snap_builder_begin_section(b, "", 1, &w), SMP_EINVAL);
    assert_int_equal(snap_builder_begin_section(b, NULL, 1, &w), SMP_EINVAL);
    assert_int_equal(snap_builder_begin_section(b, name65, 1, &w), SMP_EINVAL);
    assert_int_equal(snap_builder_begin_section(b, "has space", 1, &w), SMP_EINVAL);
    assert_int_equal(snap_builder_add_raw(b, "tab\there", 1, NULL, 0), SMP_EINVAL);
    assert_int_equal(snap_builder_add_raw(b, "caf\xc3\xa9", 1, NULL, 0), SMP_EINVAL);
    assert_int_equal(snap_builder_end_section(b), SMP_ESTATE);

    assert_int_equal(snap_builder_begin_section(b, name64, 1, &w), SMP_OK);
    assert_int_equal(snap_builder_begin_section(b, "other", 1, &w), SMP_ESTATE);
    assert_int_equal(snap_builder_add_raw(b, "other", 1, NULL, 0), SMP_ESTATE);
    assert_int_equal(snap_write_file(b, f->dir, 1, NULL, 0), SMP_ESTATE);
    assert_int_equal(snap_writer_write(w, "abc", 3), SMP_OK);
    assert_int_equal(snap_builder_end_section(b), SMP_OK);
    assert_int_equal(snap_writer_write(w, "late", 4), SMP_ESTATE);

    /* A failed write is sticky and the section is dropped at end. */
    assert_int_equal(snap_builder_begin_section(b, "broken", 1, &w), SMP_OK);
    assert_int_equal(snap_writer_write(w, NULL, 4), SMP_EINVAL);
    assert_int_equal(snap_writer_write(w, "ok", 2), SMP_EINVAL);
    assert_int_equal(snap_builder_end_section(b), SMP_EINVAL);

    char path[512], err[256];
    assert_int_equal(snap_write_file(b, f->dir, 1, path, sizeof(path)), SMP_OK);
    snap_builder_free(b);
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    assert_int_equal(snap_image_count(img), 1);
    assert_non_null(snap_image_section(img, name64));
    assert_memory_equal(snap_image_section(img, name64)->data, "abc", 3);
    assert_null(snap_image_section(img, "broken"));
    snap_image_free(img);
}

/* At most SNAP_SECTIONS_MAX sections; the full builder still writes and
 * loads. */
static void test_section_count_is_bounded(void **state)
{
    fixture *f = *state;
    char name[32], err[256];
    snap_builder *b = snap_builder_new(2);
    for (int i = 0; i < SNAP_SECTIONS_MAX; i++) {
        snprintf(name, sizeof(name), "s%d", i);
        assert_int_equal(snap_builder_add_raw(b, name, 1, name, strlen(name)), SMP_OK);
    }
    smp_writer *w;
    assert_int_equal(snap_builder_add_raw(b, "one_more", 1, NULL, 0), SMP_ERANGE);
    assert_int_equal(snap_builder_begin_section(b, "one_more", 1, &w), SMP_ERANGE);
    assert_int_equal(snap_write_file(b, f->dir, 1, NULL, 0), SMP_OK);
    snap_builder_free(b);
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest(f->dir, &img, err, sizeof(err)), SMP_OK);
    assert_int_equal(snap_image_count(img), SNAP_SECTIONS_MAX);
    assert_memory_equal(snap_image_section(img, "s1023")->data, "s1023", 5);
    snap_image_free(img);
}

/* ------------------------------------------------------------------------ */
/* A section handed out early                                                */
/* ------------------------------------------------------------------------ */

/* What the early callback saw, in order. */
typedef struct early_seen {
    int calls;
    int nulls;                   /* calls with NULL (the file refused after) */
    int null_after_section;      /* the NULL came after the section */
    snap_section got;            /* a copy of what the first call gave */
    const char *damage_path;     /* when set, flip damage_off in that file at the first call */
    off_t damage_off;
} early_seen;

static void early_record(void *arg, const snap_section *s)
{
    early_seen *e = arg;
    e->calls++;
    if (s == NULL) {
        e->nulls++;
        e->null_after_section = e->calls > 1 && e->got.data != NULL;
        return;
    }
    e->got = *s;
    if (e->damage_path != NULL) {
        int fd = open(e->damage_path, O_RDWR);
        assert_true(fd >= 0);
        uint8_t b;
        assert_int_equal(pread(fd, &b, 1, e->damage_off), 1);
        b ^= 0x10;
        assert_int_equal(pwrite(fd, &b, 1, e->damage_off), 1);
        close(fd);
    }
}

/* The named section goes out once, with the bytes, name and encoding the
 * loaded image then holds (the same bytes, not a copy); a section the file
 * does not have goes out never, and the load is as without it. */
static void test_early_section_goes_out_once_with_its_bytes(void **state)
{
    fixture *f = *state;
    char path[512], err[256] = "";
    write_sample(f, 77, 1, path, sizeof(path));
    early_seen seen = {0};
    snap_early early = {.name = "weight_metadata", .fn = early_record, .arg = &seen};
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest_early(f->dir, &early, &img, err, sizeof(err)), SMP_OK);
    assert_sample(img, 77);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.nulls, 0);
    assert_string_equal(seen.got.name, "weight_metadata");
    assert_int_equal(seen.got.encver, 2);
    assert_int_equal(seen.got.len, BIG_LEN);
    assert_ptr_equal(seen.got.data, snap_image_section(img, "weight_metadata")->data);
    snap_image_free(img);

    early_seen none = {0};
    snap_early absent = {.name = "not_there", .fn = early_record, .arg = &none};
    assert_int_equal(snap_load_newest_early(f->dir, &absent, &img, err, sizeof(err)), SMP_OK);
    assert_sample(img, 77);
    assert_int_equal(none.calls, 0);
    snap_image_free(img);
}

/* A section that does not match its checksum, or behind a damaged header or
 * frame, is never handed out; the refusal is the one snap_load_newest gives. */
static void test_early_section_that_does_not_check_is_not_handed_out(void **state)
{
    fixture *f = *state;
    char path[512], name[64], err[512];
    write_sample(f, 78, 1, path, sizeof(path));
    snap_name(78, ".snap", name, sizeof(name));
    size_t len;
    uint8_t *orig = slurp(path, &len);
    damage_case cases[] = {
        {17, "header"},
        {frame_offset(1) + 9, "section #1 frame"},
        {frame_offset(1) + 32 + 12 + 5, "section 'host_objects' checksum"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        spill_flipped(path, orig, len, cases[c].off);
        early_seen seen = {0};
        snap_early early = {.name = "host_objects", .fn = early_record, .arg = &seen};
        snap_image *img = (snap_image *)&seen;
        err[0] = '\0';
        assert_int_equal(snap_load_newest_early(f->dir, &early, &img, err, sizeof(err)),
                         SMP_EPROTO);
        assert_null(img);
        assert_int_equal(seen.calls, 0);
        if (strstr(err, name) == NULL || strstr(err, cases[c].what) == NULL)
            fail_msg("message \"%s\" does not name \"%s\"", err, cases[c].what);
    }
    free(orig);
}

/* The section goes out as soon as its bytes are in, before the rest of a
 * large file is read: damage made to a later section from inside the
 * callback is found by the rest of the load, which refuses the file and
 * calls back with NULL before it returns (the section's user must be done
 * with the bytes by then). */
static void test_early_section_goes_out_before_the_rest_is_read(void **state)
{
    fixture *f = *state;
    char path[512], err[512] = "";
    const size_t big = (size_t)40 << 20; /* more than the loader reads at once */
    uint8_t *bytes = malloc(big);
    assert_non_null(bytes);
    for (size_t i = 0; i < big; i++) bytes[i] = (uint8_t)(i * 13 + (i >> 12));
    snap_builder *b = snap_builder_new(79);
    assert_int_equal(snap_builder_add_raw(b, "host_objects", 1, bytes, 1000), SMP_OK);
    assert_int_equal(snap_builder_add_raw(b, "later", 1, bytes, big), SMP_OK);
    assert_int_equal(snap_write_file(b, f->dir, 1, path, sizeof(path)), SMP_OK);
    snap_builder_free(b);
    free(bytes);

    /* Unharmed, it loads, the section handed out once. */
    early_seen seen = {0};
    snap_early early = {.name = "host_objects", .fn = early_record, .arg = &seen};
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest_early(f->dir, &early, &img, err, sizeof(err)), SMP_OK);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.got.len, 1000);
    snap_image_free(img);

    /* A byte near the end of "later", flipped by the callback. */
    early_seen hurt = {0};
    hurt.damage_path = path;
    hurt.damage_off = (off_t)(32 + 32 + strlen("host_objects") + 1000 + 32 + strlen("later") +
                              big - 100);
    snap_early early2 = {.name = "host_objects", .fn = early_record, .arg = &hurt};
    img = (snap_image *)&hurt;
    assert_int_equal(snap_load_newest_early(f->dir, &early2, &img, err, sizeof(err)), SMP_EPROTO);
    assert_null(img);
    assert_non_null(strstr(err, "section 'later' checksum"));
    assert_int_equal(hurt.calls, 2);
    assert_int_equal(hurt.nulls, 1);
    assert_true(hurt.null_after_section);
}

/* A streamed section's user: a thread started from the callback that waits
 * for the bytes a MiB at a time, as a decoder would, and checks them. */
typedef struct stream_user {
    pthread_t t;
    int running;
    snap_section s;
    size_t first;            /* bytes in when the section went out */
    size_t got;              /* bytes in when its waiting ended */
    int same;                /* those bytes are the written ones */
    int calls, nulls;
    const char *path;        /* when set, the callback damages this file: */
    off_t flip_at;           /* flips this byte (-1 none) */
    off_t cut_at;            /* or cuts the file here (0 none) */
} stream_user;

static uint8_t stream_byte(size_t i)
{
    return (uint8_t)(i * 13 + (i >> 12));
}

static void *stream_use(void *arg)
{
    stream_user *u = arg;
    const size_t step = (size_t)1 << 20;
    size_t upto = 0;
    while (upto < u->s.len) {
        upto = u->s.len - upto < step ? u->s.len : upto + step;
        size_t n = snap_feed_wait(u->s.feed, upto);
        if (n < upto) {
            u->got = n;
            return NULL;
        }
    }
    u->got = u->s.len;
    u->same = 1;
    for (size_t i = 0; i < u->s.len && u->same; i++) u->same = u->s.data[i] == stream_byte(i);
    return NULL;
}

static void stream_start(void *arg, const snap_section *s)
{
    stream_user *u = arg;
    u->calls++;
    if (s == NULL) {
        u->nulls++;
        if (u->running) assert_int_equal(pthread_join(u->t, NULL), 0);
        u->running = 0;
        return;
    }
    u->s = *s;
    assert_non_null(s->feed);
    u->first = snap_feed_wait(s->feed, 0);
    if (u->path != NULL) {
        int fd = open(u->path, O_RDWR);
        assert_true(fd >= 0);
        if (u->cut_at > 0) assert_int_equal(ftruncate(fd, u->cut_at), 0);
        if (u->flip_at >= 0) {
            uint8_t b;
            assert_int_equal(pread(fd, &b, 1, u->flip_at), 1);
            b ^= 0x10;
            assert_int_equal(pwrite(fd, &b, 1, u->flip_at), 1);
        }
        close(fd);
    }
    assert_int_equal(pthread_create(&u->t, NULL, stream_use, u), 0);
    u->running = 1;
}

/* With stream, a section larger than one read goes out once its frame is in,
 * before its body is: its user waits on the feed and gets every byte. A
 * byte of it flipped meanwhile is found once the file is in (the file is
 * refused, naming the section's checksum; the callback is called with NULL
 * after the user got all the bytes); a file cut short meanwhile ends the
 * feed short (the user's wait returns what came), is refused, and the
 * callback is called with NULL. */
static void test_streamed_section_goes_out_before_its_bytes(void **state)
{
    fixture *f = *state;
    char path[512], err[512] = "";
    const size_t big = (size_t)40 << 20; /* more than the loader reads at once */
    uint8_t *bytes = malloc(big);
    assert_non_null(bytes);
    for (size_t i = 0; i < big; i++) bytes[i] = stream_byte(i);
    snap_builder *b = snap_builder_new(80);
    assert_int_equal(snap_builder_add_raw(b, "host_objects", 1, bytes, big), SMP_OK);
    assert_int_equal(snap_builder_add_raw(b, "later", 1, bytes, 1000), SMP_OK);
    assert_int_equal(snap_write_file(b, f->dir, 1, path, sizeof(path)), SMP_OK);
    snap_builder_free(b);
    free(bytes);
    const off_t body = 32 + 32 + (off_t)strlen("host_objects");

    stream_user u = {.flip_at = -1};
    snap_early early = {.name = "host_objects", .fn = stream_start, .arg = &u, .stream = 1};
    snap_image *img = NULL;
    assert_int_equal(snap_load_newest_early(f->dir, &early, &img, err, sizeof(err)), SMP_OK);
    assert_int_equal(pthread_join(u.t, NULL), 0);
    assert_int_equal(u.calls, 1);
    assert_true(u.first < big);
    assert_int_equal(u.got, big);
    assert_true(u.same);
    assert_ptr_equal(u.s.data, snap_image_section(img, "host_objects")->data);
    assert_null(snap_image_section(img, "host_objects")->feed);
    snap_early_fini(&early);
    snap_image_free(img);

    stream_user hurt = {.path = path, .flip_at = body + (off_t)big - 100};
    snap_early early2 = {.name = "host_objects", .fn = stream_start, .arg = &hurt, .stream = 1};
    img = (snap_image *)&hurt;
    assert_int_equal(snap_load_newest_early(f->dir, &early2, &img, err, sizeof(err)), SMP_EPROTO);
    assert_null(img);
    assert_non_null(strstr(err, "section 'host_objects' checksum"));
    assert_int_equal(hurt.calls, 2);
    assert_int_equal(hurt.nulls, 1);
    assert_int_equal(hurt.got, big);
    assert_false(hurt.same); /* the user saw the flipped byte: only the checksum stops it */
    snap_early_fini(&early2);

    b = snap_builder_new(82); /* the newest now, its objects section to be cut */
    bytes = calloc(1, big);
    assert_non_null(bytes);
    for (size_t i = 0; i < big; i++) bytes[i] = stream_byte(i);
    assert_int_equal(snap_builder_add_raw(b, "host_objects", 1, bytes, big), SMP_OK);
    assert_int_equal(snap_write_file(b, f->dir, 1, path, sizeof(path)), SMP_OK);
    snap_builder_free(b);
    free(bytes);
    stream_user cut = {.path = path, .flip_at = -1, .cut_at = body + (off_t)big / 2};
    snap_early early3 = {.name = "host_objects", .fn = stream_start, .arg = &cut, .stream = 1};
    img = (snap_image *)&cut;
    assert_int_equal(snap_load_newest_early(f->dir, &early3, &img, err, sizeof(err)), SMP_EIO);
    assert_null(img);
    assert_non_null(strstr(err, "file shrank"));
    assert_int_equal(cut.nulls, 1);
    assert_true(cut.got < big);
    assert_false(cut.same);
    snap_early_fini(&early3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_keeps_every_section_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_snapshot_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_gives_section_bytes_and_empty_for_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_carried_section_survives_load_rebuild_write_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_byte_in_each_region_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_single_byte_flip_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncation_at_any_point_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_lengths_and_counts_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_newest_is_refused_even_with_older_valid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_two_leaves_the_two_newest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_tmp_is_ignored_and_removed_by_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_tmp_is_removed_by_next_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_second_writer_is_busy_and_its_tmp_is_spared, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_snapshot_is_not_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_or_older_sequence_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_write_leaves_no_trace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_path_buffer_writes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_path_is_the_written_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loaded_sections_are_the_file_mapped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_sections_written_in_pieces_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_and_reader_fit_the_host_api, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_section_names_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_names_and_misuse_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_section_count_is_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_early_section_goes_out_once_with_its_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_early_section_that_does_not_check_is_not_handed_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_early_section_goes_out_before_the_rest_is_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_streamed_section_goes_out_before_its_bytes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
