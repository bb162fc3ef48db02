/* test_node_ranges.c -- the range table a node keeps beside its segment.
 *
 * Real files under /tmp. Ranges added and removed survive a reopen (a node
 * restart); overlapping and out-of-segment ranges are refused; a torn or
 * corrupt tail is cut and what precedes it kept; a table of another
 * segment size is discarded; the verify pass tells replicas whose bytes
 * still hash to their checksum from the rest; the log is compacted. */
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
#include <openssl/evp.h>

#include "node_ranges.h"

#define SIZE (1u << 20)

static char g_dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/wm-test-ranges-%d", (int)getpid());
    return 0;
}

static int teardown(void **state)
{
    char cmd[512];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static seg_segment *open_seg(const char *id, uint64_t size)
{
    seg_options o = { .dir = g_dir, .id = id, .size = size };
    seg_segment *s = NULL;
    char err[256];
    assert_int_equal(seg_open(&o, &s, err, sizeof(err)), SMP_OK);
    return s;
}

static node_ranges *open_ranges(seg_segment *s, node_ranges_open_info *info)
{
    node_ranges *r = NULL;
    char err[256];
    assert_int_equal(node_ranges_open(s, &r, info, err, sizeof(err)), SMP_OK);
    return r;
}

static void ranges_path(const seg_segment *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "%.*s.ranges", (int)(strlen(seg_path(s)) - 4), seg_path(s));
}

static const uint8_t SHA_A[32] = { 1 };
static const uint8_t SHA_B[32] = { 2 };

typedef struct collect {
    uint64_t offs[16];
    int n;
} collect;

static int collect_fn(void *arg, const node_range *r)
{
    collect *c = arg;
    c->offs[c->n++] = r->offset;
    return 0;
}

/* Ranges come back after a restart, in offset order, with keys and sums. */
static void test_add_remove_and_reopen(void **state)
{
    seg_segment *s = open_seg("r1", SIZE);
    node_ranges_open_info info;
    node_ranges *r = open_ranges(s, &info);
    node_range nr;
    collect c = { .n = 0 };
    (void)state;
    assert_int_equal(info.loaded, 0);
    assert_int_equal(node_ranges_add(r, "k/b", 4096, 100, SHA_B), SMP_OK);
    assert_int_equal(node_ranges_add(r, "k/a", 0, 64, SHA_A), SMP_OK);
    assert_int_equal(node_ranges_add(r, "k/c", 8192, 0, SHA_A), SMP_OK);
    assert_int_equal(node_ranges_add(r, "k/d", 9000, 10, SHA_A), SMP_OK);
    assert_int_equal(node_ranges_remove(r, 9000), SMP_OK);
    assert_int_equal(node_ranges_remove(r, 9000), SMP_ENOTFOUND);
    node_ranges_close(r);
    seg_close(s);

    s = open_seg("r1", SIZE);
    r = open_ranges(s, &info);
    assert_int_equal(info.loaded, 3);
    assert_int_equal(info.cut_tail, 0);
    assert_int_equal(node_ranges_count(r), 3);
    assert_int_equal(node_ranges_visit(r, collect_fn, &c), SMP_OK);
    assert_int_equal(c.n, 3);
    assert_int_equal(c.offs[0], 0);
    assert_int_equal(c.offs[1], 4096);
    assert_int_equal(c.offs[2], 8192);
    assert_int_equal(node_ranges_get(r, 4096, &nr), SMP_OK);
    assert_string_equal(nr.key, "k/b");
    assert_int_equal(nr.length, 100);
    assert_memory_equal(nr.sha256, SHA_B, 32);
    assert_int_equal(node_ranges_get(r, 9000, &nr), SMP_ENOTFOUND);
    node_ranges_destroy(r);
    seg_destroy(s);
}

/* Overlaps (including with a 0-byte range's offset) and ranges outside the
 * segment are refused; bad keys too. */
static void test_refusals(void **state)
{
    seg_segment *s = open_seg("r2", SIZE);
    node_ranges *r = open_ranges(s, NULL);
    char longkey[NODE_RANGES_KEY_MAX + 2];
    (void)state;
    assert_int_equal(node_ranges_add(r, "a", 1000, 1000, SHA_A), SMP_OK);
    assert_int_equal(node_ranges_add(r, "b", 1999, 10, SHA_A), SMP_EEXIST);
    assert_int_equal(node_ranges_add(r, "b", 990, 11, SHA_A), SMP_EEXIST);
    assert_int_equal(node_ranges_add(r, "b", 1000, 0, SHA_A), SMP_EEXIST);
    assert_int_equal(node_ranges_add(r, "b", 990, 10, SHA_A), SMP_OK);
    assert_int_equal(node_ranges_add(r, "c", 5000, 0, SHA_A), SMP_OK);
    assert_int_equal(node_ranges_add(r, "d", 4990, 11, SHA_A), SMP_EEXIST);
    assert_int_equal(node_ranges_add(r, "d", SIZE - 10, 11, SHA_A), SMP_ERANGE);
    assert_int_equal(node_ranges_add(r, "d", UINT64_MAX - 5, 10, SHA_A), SMP_ERANGE);
    assert_int_equal(node_ranges_add(r, "", 20000, 10, SHA_A), SMP_EINVAL);
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    assert_int_equal(node_ranges_add(r, longkey, 20000, 10, SHA_A), SMP_EINVAL);
    assert_int_equal(node_ranges_count(r), 3);
    node_ranges_destroy(r);
    seg_destroy(s);
}

/* A torn last record and a corrupt record are cut with everything after
 * them; what precedes stays. */
static void test_torn_and_corrupt_tails(void **state)
{
    seg_segment *s = open_seg("r3", SIZE);
    node_ranges_open_info info;
    node_ranges *r = open_ranges(s, NULL);
    char path[512];
    struct stat st;
    int fd;
    off_t after_two;
    (void)state;
    ranges_path(s, path, sizeof(path));
    assert_int_equal(node_ranges_add(r, "a", 0, 64, SHA_A), SMP_OK);
    assert_int_equal(node_ranges_add(r, "b", 64, 64, SHA_A), SMP_OK);
    assert_int_equal(stat(path, &st), 0);
    after_two = st.st_size;
    assert_int_equal(node_ranges_add(r, "c", 128, 64, SHA_A), SMP_OK);
    node_ranges_close(r);

    /* torn: the last record lost its final bytes */
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 3), 0);
    r = open_ranges(s, &info);
    assert_int_equal(info.cut_tail, 1);
    assert_int_equal(info.loaded, 2);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, after_two);
    /* and appending goes on from the cut */
    assert_int_equal(node_ranges_add(r, "c", 128, 64, SHA_A), SMP_OK);
    node_ranges_close(r);

    /* corrupt: a byte flipped inside the second record */
    fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    {
        uint8_t b;
        off_t at = after_two - 10; /* inside the second record */
        assert_int_equal(pread(fd, &b, 1, at), 1);
        b ^= 0xff;
        assert_int_equal(pwrite(fd, &b, 1, at), 1);
    }
    close(fd);
    r = open_ranges(s, &info);
    assert_int_equal(info.cut_tail, 1);
    assert_int_equal(info.loaded, 1);
    assert_int_equal(node_ranges_get(r, 0, NULL), SMP_OK);
    assert_int_equal(node_ranges_get(r, 64, NULL), SMP_ENOTFOUND);
    node_ranges_close(r);

    /* garbage only: discarded, starts empty */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "garbage garbage garbage", 23), 23);
    close(fd);
    r = open_ranges(s, &info);
    assert_int_equal(info.discarded, 1);
    assert_int_equal(info.loaded, 0);
    node_ranges_destroy(r);
    seg_destroy(s);
}

/* The table of a segment of another size is dropped. */
static void test_other_segment_size_discards(void **state)
{
    seg_segment *s = open_seg("r4", SIZE);
    node_ranges_open_info info;
    node_ranges *r = open_ranges(s, NULL);
    (void)state;
    assert_int_equal(node_ranges_add(r, "a", 0, 64, SHA_A), SMP_OK);
    node_ranges_close(r);
    seg_destroy(s);
    s = open_seg("r4", SIZE * 2);
    r = open_ranges(s, &info);
    assert_int_equal(info.discarded, 1);
    assert_int_equal(node_ranges_count(r), 0);
    node_ranges_destroy(r);
    seg_destroy(s);
}

typedef struct verdicts {
    int good;
    int bad;
} verdicts;

static int verdict_fn(void *arg, const node_range *range, int matches)
{
    verdicts *v = arg;
    (void)range;
    if (matches)
        v->good++;
    else
        v->bad++;
    return 0;
}

/* Verify re-hashes the bytes: an intact replica matches, a damaged one not. */
static void test_verify_against_bytes(void **state)
{
    seg_segment *s = open_seg("r5", SIZE);
    node_ranges *r = open_ranges(s, NULL);
    uint8_t data[4096], sha[32];
    verdicts v = { 0, 0 };
    (void)state;
    memset(data, 0x77, sizeof(data));
    assert_int_equal(seg_write(s, 8192, data, sizeof(data)), SMP_OK);
    assert_int_equal(seg_write(s, 65536, data, sizeof(data)), SMP_OK);
    EVP_Digest(data, sizeof(data), sha, NULL, EVP_sha256(), NULL);
    assert_int_equal(node_ranges_add(r, "ok", 8192, sizeof(data), sha), SMP_OK);
    assert_int_equal(node_ranges_add(r, "damaged", 65536, sizeof(data), sha), SMP_OK);
    seg_ptr(s, 65536 + 100, 1)[0] ^= 1;
    assert_int_equal(node_ranges_verify(r, s, verdict_fn, &v), SMP_OK);
    assert_int_equal(v.good, 1);
    assert_int_equal(v.bad, 1);
    node_ranges_destroy(r);
    seg_destroy(s);
}

/* Many adds and removes: the log is compacted and reopens to the same set. */
static void test_compaction(void **state)
{
    seg_segment *s = open_seg("r6", SIZE);
    node_ranges_open_info info;
    node_ranges *r = open_ranges(s, NULL);
    char path[512];
    struct stat st;
    (void)state;
    ranges_path(s, path, sizeof(path));
    for (int round = 0; round < 40; round++) {
        for (uint64_t i = 0; i < 100; i++)
            assert_int_equal(node_ranges_add(r, "some/key/of/an/object", i * 64, 64, SHA_A), SMP_OK);
        for (uint64_t i = 0; i < 100; i++)
            if (round == 39 && i % 10 == 0)
                continue;
            else
                assert_int_equal(node_ranges_remove(r, i * 64), SMP_OK);
    }
    assert_int_equal(node_ranges_count(r), 10);
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size < 200 * 1024); /* 8000 records uncompacted: ~650 KiB */
    node_ranges_close(r);
    r = open_ranges(s, &info);
    assert_int_equal(info.loaded, 10);
    assert_int_equal(info.cut_tail, 0);
    node_ranges_destroy(r);
    assert_int_not_equal(access(path, F_OK), 0);
    seg_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_remove_and_reopen),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_torn_and_corrupt_tails),
        cmocka_unit_test(test_other_segment_size_discards),
        cmocka_unit_test(test_verify_against_bytes),
        cmocka_unit_test(test_compaction),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
