/* test_node_segment.c -- a node's segment file and a client's mapping of it.
 *
 * Real files in a scratch directory under /tmp: create, reopen after a
 * "restart" with the bytes intact, grow a smaller file in place and cut a
 * larger one only on seg_shrink, refuse a second
 * opener, bounds checks, destroy, the co-located client path (a client
 * mapping sees what the node writes and the reverse), and the pages a
 * segment directory's mount gives. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "node_segment.h"
#include "seg_map.h"

#define SIZE (1u << 20)

static char g_dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/wm-test-seg-%d", (int)getpid());
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
    seg_options o = { .dir = g_dir, .id = id, .size = size, .preallocate = 1 };
    seg_segment *s = NULL;
    char err[256];
    assert_int_equal(seg_open(&o, &s, err, sizeof(err)), SMP_OK);
    return s;
}

/* A new segment is zero-filled, takes writes, and a reopened one (the node
 * restarted) comes back with its bytes. */
static void test_segment_survives_reopen(void **state)
{
    uint8_t buf[4096], out[4096];
    char path[512];
    struct stat st;
    seg_segment *s;
    (void)state;

    s = open_seg("seg-a", SIZE);
    assert_int_equal(seg_size(s), SIZE);
    assert_int_equal(seg_reopened(s), 0);
    assert_int_equal(seg_read(s, SIZE - sizeof(out), out, sizeof(out)), SMP_OK);
    for (size_t i = 0; i < sizeof(out); i++)
        assert_int_equal(out[i], 0);
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 7 + 3);
    assert_int_equal(seg_write(s, 12345, buf, sizeof(buf)), SMP_OK);
    snprintf(path, sizeof(path), "%s", seg_path(s));
    seg_close(s);

    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, SIZE);
    s = open_seg("seg-a", SIZE);
    assert_int_equal(seg_reopened(s), 1);
    assert_int_equal(seg_read(s, 12345, out, sizeof(out)), SMP_OK);
    assert_memory_equal(buf, out, sizeof(buf));
    assert_int_equal(seg_destroy(s), SMP_OK);
    assert_int_not_equal(stat(path, &st), 0);
}

/* A node process killed with SIGKILL (no close, no unmap) leaves a segment
 * that the next node opens with the bytes and without a stale lock. */
static void test_segment_survives_sigkill(void **state)
{
    int status;
    uint8_t out[64];
    seg_segment *s;
    pid_t pid;
    (void)state;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        seg_options o = { .dir = g_dir, .id = "seg-k", .size = SIZE };
        seg_segment *cs = NULL;
        if (seg_open(&o, &cs, NULL, 0) != SMP_OK)
            _exit(2);
        memset(seg_ptr(cs, 777, 64), 0x3c, 64);
        raise(SIGKILL);
        _exit(3);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    s = open_seg("seg-k", SIZE);
    assert_int_equal(seg_reopened(s), 1);
    assert_int_equal(seg_read(s, 777, out, sizeof(out)), SMP_OK);
    for (size_t i = 0; i < sizeof(out); i++)
        assert_int_equal(out[i], 0x3c);
    seg_destroy(s);
}

/* Segment growth: a file smaller than the configured size is grown in
 * place, every byte it held where it was, the new tail zero; a mapping
 * taken of the old size (a co-located client's) still reads and writes the
 * same bytes. */
static void test_smaller_file_is_grown_in_place(void **state)
{
    seg_options o = { .dir = g_dir, .id = "seg-b", .size = SIZE * 2 };
    seg_segment *s = open_seg("seg-b", SIZE), *s2 = NULL;
    char err[512];
    struct stat st;
    uint8_t got[64];
    (void)state;
    memset(seg_ptr(s, SIZE - 64, 64), 0x5a, 64);
    int fd = open(seg_path(s), O_RDWR);
    assert_true(fd >= 0);
    uint8_t *old = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(old != MAP_FAILED);
    seg_close(s);
    assert_int_equal(seg_open(&o, &s2, err, sizeof(err)), SMP_OK);
    assert_int_equal(seg_size(s2), SIZE * 2);
    assert_int_equal(seg_grown_from(s2), SIZE);
    assert_int_equal(seg_reopened(s2), 1);
    assert_int_equal(stat(seg_path(s2), &st), 0);
    assert_int_equal((uint64_t)st.st_size, SIZE * 2);
    assert_int_equal(seg_read(s2, SIZE - 64, got, 64), SMP_OK);
    for (size_t i = 0; i < 64; i++) assert_int_equal(got[i], 0x5a);
    assert_int_equal(seg_read(s2, SIZE, got, 64), SMP_OK);
    for (size_t i = 0; i < 64; i++) assert_int_equal(got[i], 0);
    /* the old mapping and the grown segment share the old range */
    old[0] = 0x11;
    assert_int_equal(seg_read(s2, 0, got, 1), SMP_OK);
    assert_int_equal(got[0], 0x11);
    munmap(old, SIZE);
    close(fd);
    seg_destroy(s2);
}

/* A file larger than the configured size is opened whole (nothing cut
 * before the master agreed), then seg_shrink serves and keeps only the
 * asked bytes; growing past seg_size is refused. */
static void test_larger_file_is_cut_only_by_seg_shrink(void **state)
{
    seg_options o = { .dir = g_dir, .id = "seg-c", .size = SIZE };
    seg_segment *s = open_seg("seg-c", SIZE * 2), *s2 = NULL;
    char err[512];
    struct stat st;
    uint8_t b = 0;
    (void)state;
    memset(seg_ptr(s, SIZE + 64, 64), 0x77, 64);
    seg_close(s);
    assert_int_equal(seg_open(&o, &s2, err, sizeof(err)), SMP_OK);
    assert_int_equal(seg_size(s2), SIZE * 2);
    assert_int_equal(seg_requested_size(s2), SIZE);
    assert_int_equal(seg_read(s2, SIZE + 64, &b, 1), SMP_OK);
    assert_int_equal(b, 0x77);
    assert_int_equal(seg_shrink(s2, SIZE * 3, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(seg_shrink(s2, SIZE, err, sizeof(err)), SMP_OK);
    assert_int_equal(seg_size(s2), SIZE);
    assert_int_equal(seg_read(s2, SIZE + 64, &b, 1), SMP_ERANGE);
    assert_int_equal(stat(seg_path(s2), &st), 0);
    assert_int_equal((uint64_t)st.st_size, SIZE);
    seg_destroy(s2);
}

/* Wait until the pre-fault thread has touched the whole served size. */
static void wait_prefaulted(const seg_segment *s)
{
    while (seg_prefaulted(s) < seg_size(s)) sched_yield();
    assert_int_equal(seg_prefaulted(s), seg_size(s));
}

/* The pre-fault of a reopened segment touches every page and changes no
 * byte: the bytes a previous node left (a replica) read back the same. */
static void test_prefault_keeps_every_byte(void **state)
{
    seg_options o = { .dir = g_dir, .id = "seg-p", .size = SIZE * 4, .prefault = 1 };
    seg_segment *s = open_seg("seg-p", SIZE * 4), *s2 = NULL;
    uint8_t *want = malloc(SIZE * 4), *got = malloc(SIZE * 4);
    char err[256];
    (void)state;
    assert_non_null(want);
    assert_non_null(got);
    assert_int_equal(seg_prefaulted(s), 0); /* not asked for */
    for (size_t i = 0; i < SIZE * 4; i++) want[i] = (uint8_t)(i * 131 + (i >> 12));
    assert_int_equal(seg_write(s, 0, want, SIZE * 4), SMP_OK);
    seg_close(s);
    assert_int_equal(seg_open(&o, &s2, err, sizeof(err)), SMP_OK);
    wait_prefaulted(s2);
    assert_int_equal(seg_read(s2, 0, got, SIZE * 4), SMP_OK);
    assert_memory_equal(got, want, SIZE * 4);
    seg_destroy(s2);
    free(want);
    free(got);
}

/* A shrink while the pre-fault runs: nothing past the cut is touched (a
 * touch there would be a SIGBUS) and the pre-fault ends at the new size;
 * a close while it runs stops it. */
static void test_prefault_stops_at_a_cut_and_at_close(void **state)
{
    seg_options o = { .dir = g_dir, .id = "seg-q", .size = SIZE * 64, .prefault = 1 };
    seg_segment *s = NULL;
    char err[256];
    (void)state;
    assert_int_equal(seg_open(&o, &s, err, sizeof(err)), SMP_OK);
    assert_int_equal(seg_shrink(s, SIZE * 3 + 100, err, sizeof(err)), SMP_OK);
    wait_prefaulted(s);
    assert_int_equal(seg_prefaulted(s), SIZE * 3 + 100);
    seg_destroy(s);
    s = NULL;
    assert_int_equal(seg_open(&o, &s, err, sizeof(err)), SMP_OK);
    seg_destroy(s); /* joined, whatever it had touched */
}

/* Two openers of one segment: the second is refused (after seg_open's
 * wait) while the first holds it. */
static void test_second_opener_is_refused(void **state)
{
    seg_options o = { .dir = g_dir, .id = "seg-c", .size = SIZE };
    seg_segment *s = open_seg("seg-c", SIZE), *s2 = NULL;
    char err[512];
    (void)state;
    assert_int_equal(seg_open(&o, &s2, err, sizeof(err)), SMP_EBUSY);
    assert_null(s2);
    seg_close(s);
    assert_int_equal(seg_open(&o, &s2, err, sizeof(err)), SMP_OK);
    seg_destroy(s2);
}

/* A holder that lets go within seg_open's wait -- as a killed master's
 * forked snapshot writer does when it dies with its parent -- does not
 * make the open fail: a child process holds the lock, then exits. */
static void test_lock_released_meanwhile_is_taken(void **state)
{
    seg_options o = { .dir = g_dir, .id = "seg-w", .size = SIZE };
    seg_segment *s = open_seg("seg-w", SIZE);
    char err[512], path[512], go;
    int ready[2];
    (void)state;
    assert_int_equal(seg_path_for(g_dir, "seg-w", path, sizeof(path)), 0);
    seg_close(s);
    s = NULL;
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(path, O_RDWR);
        if (fd < 0 || flock(fd, LOCK_EX) < 0) _exit(1);
        if (write(ready[1], "x", 1) != 1) _exit(1);
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
        _exit(0);
    }
    close(ready[1]);
    assert_int_equal(read(ready[0], &go, 1), 1); /* the child holds the lock */
    close(ready[0]);
    if (seg_open(&o, &s, err, sizeof(err)) != SMP_OK) fail_msg("seg_open: %s", err);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    seg_destroy(s);
}

/* A segment file readable by others (planted in a shared directory, or
 * loosened by hand) is refused. */
static void test_foreign_or_open_file_is_refused(void **state)
{
    seg_options o = { .dir = g_dir, .id = "seg-f", .size = SIZE };
    seg_segment *s = open_seg("seg-f", SIZE), *s2 = NULL;
    char path[512], err[512];
    (void)state;
    snprintf(path, sizeof(path), "%s", seg_path(s));
    seg_close(s);
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(seg_open(&o, &s2, err, sizeof(err)), SMP_EINVAL);
    assert_non_null(strstr(err, "0600"));
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(seg_open(&o, &s2, err, sizeof(err)), SMP_OK);
    seg_destroy(s2);
}

/* Ranges outside the segment, including ones that overflow, are refused. */
static void test_bounds(void **state)
{
    uint8_t b[16] = { 0 };
    seg_segment *s = open_seg("seg-d", SIZE);
    (void)state;
    assert_int_equal(seg_check_range(s, 0, SIZE), SMP_OK);
    assert_int_equal(seg_check_range(s, SIZE, 0), SMP_OK);
    assert_int_equal(seg_check_range(s, SIZE, 1), SMP_ERANGE);
    assert_int_equal(seg_check_range(s, SIZE - 1, 2), SMP_ERANGE);
    assert_int_equal(seg_check_range(s, UINT64_MAX, 2), SMP_ERANGE);
    assert_int_equal(seg_check_range(s, 8, UINT64_MAX - 4), SMP_ERANGE);
    assert_int_equal(seg_write(s, SIZE - 8, b, sizeof(b)), SMP_ERANGE);
    assert_int_equal(seg_read(s, UINT64_MAX - 4, b, sizeof(b)), SMP_ERANGE);
    assert_null(seg_ptr(s, SIZE - 8, 16));
    assert_non_null(seg_ptr(s, SIZE - 16, 16));
    seg_destroy(s);
}

/* Ids that could escape the directory or hide the file are refused. */
static void test_bad_ids(void **state)
{
    const char *bad[] = { "", ".", "..", "../x", "a/b", ".hidden", "a b", "x\n" };
    char err[256];
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        seg_options o = { .dir = g_dir, .id = bad[i], .size = SIZE };
        seg_segment *s = NULL;
        assert_int_equal(seg_open(&o, &s, err, sizeof(err)), SMP_EINVAL);
        assert_null(s);
    }
    {
        seg_options o = { .dir = g_dir, .id = "ok", .size = 0 };
        seg_segment *s = NULL;
        assert_int_equal(seg_open(&o, &s, err, sizeof(err)), SMP_EINVAL);
    }
    assert_int_equal(seg_validate_id("node-1.seg_0"), SMP_OK);
}

/* The co-located path: what a client writes through its mapping the node
 * reads, what the node writes the client reads, and the checksums agree. */
static void test_client_mapping_shares_bytes(void **state)
{
    seg_segment *s = open_seg("seg-e", SIZE);
    seg_map rw, ro;
    uint8_t in[8192], out[8192], md1[32], md2[32];
    char err[256];
    (void)state;
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (uint8_t)(i ^ 0x5a);
    assert_int_equal(seg_map_writable(seg_path(s), 1, &rw, err, sizeof(err)), SMP_OK);
    assert_int_equal(rw.size, SIZE);
    assert_int_equal(seg_map_put(&rw, 4096, in, sizeof(in)), SMP_OK);
    assert_int_equal(seg_read(s, 4096, out, sizeof(out)), SMP_OK);
    assert_memory_equal(in, out, sizeof(in));

    assert_int_equal(seg_write(s, 65536, in, 100), SMP_OK);
    assert_int_equal(seg_map_readonly(seg_path(s), 0, &ro, err, sizeof(err)), SMP_OK);
    assert_int_equal(seg_map_get(&ro, 65536, out, 100), SMP_OK);
    assert_memory_equal(in, out, 100);
    assert_int_equal(seg_map_put(&ro, 0, in, 1), SMP_ESTATE);
    assert_int_equal(seg_map_get(&ro, SIZE - 10, out, 11), SMP_ERANGE);
    assert_int_equal(seg_map_put(&rw, UINT64_MAX, in, 2), SMP_ERANGE);

    assert_int_equal(seg_sha256(s, 4096, sizeof(in), md1), SMP_OK);
    assert_int_equal(EVP_Digest(in, sizeof(in), md2, NULL, EVP_sha256(), NULL), 1);
    assert_memory_equal(md1, md2, 32);
    assert_int_equal(seg_sha256(s, SIZE, 1, md1), SMP_ERANGE);

    seg_map_close(&rw);
    seg_map_close(&ro);
    seg_map_close(&ro); /* closing twice is harmless */
    assert_null(ro.base);
    seg_destroy(s);

    assert_int_equal(seg_map_readonly("/tmp/wm-no-such-segment.seg", 0, &ro, err, sizeof(err)),
                     SMP_ENOTFOUND);
}

/* A client mapping walks each page into its page tables once: a prefault
 * of pages it already made present populates nothing, a released range is
 * walked again, and a range outside the mapping populates nothing and
 * marks nothing. A new mapping of the same file starts with nothing
 * present. */
static void test_client_mapping_prefaults_each_page_once(void **state)
{
    seg_segment *s = open_seg("seg-p", SIZE);
    seg_map m, again;
    uint8_t out[100];
    char err[256];
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    (void)state;
    assert_int_equal(seg_write(s, 3 * page + 5, "abc", 3), SMP_OK);
    assert_int_equal(seg_map_readonly(seg_path(s), 0, &m, err, sizeof(err)), SMP_OK);
    /* bytes [page + 1, 4 * page + 1) touch pages 1..4 */
    assert_int_equal(seg_map_prefault(&m, page + 1, 3 * page), 4 * page);
    assert_int_equal(seg_map_prefault(&m, page + 1, 3 * page), 0);
    assert_int_equal(seg_map_prefault(&m, 2 * page, page), 0);
    /* pages 0 and 5 are new at both ends of a wider range */
    assert_int_equal(seg_map_prefault(&m, 0, 6 * page), 2 * page);
    assert_int_equal(seg_map_get(&m, 3 * page + 5, out, 3), SMP_OK);
    assert_memory_equal(out, "abc", 3);

    seg_map_release(&m, 2 * page, 1); /* page 2 only */
    assert_int_equal(seg_map_prefault(&m, 0, 6 * page), page);
    assert_int_equal(seg_map_get(&m, 3 * page + 5, out, 3), SMP_OK);
    assert_memory_equal(out, "abc", 3);

    /* outside the mapping, or empty: nothing walked, nothing marked */
    assert_int_equal(seg_map_prefault(&m, SIZE - 10, 11), 0);
    assert_int_equal(seg_map_prefault(&m, UINT64_MAX, 2), 0);
    assert_int_equal(seg_map_prefault(&m, 7 * page, 0), 0);
    assert_int_equal(seg_map_prefault(&m, 7 * page, page), page);
    seg_map_release(&m, SIZE, 1); /* ignored */
    assert_int_equal(seg_map_prefault(NULL, 0, page), 0);

    assert_int_equal(seg_map_readonly(seg_path(s), 0, &again, err, sizeof(err)), SMP_OK);
    assert_int_equal(seg_map_prefault(&again, page + 1, 3 * page), 4 * page);
    seg_map_close(&again);
    seg_map_close(&m);
    assert_null(m.present);
    assert_int_equal(seg_map_prefault(&m, 0, page), 0); /* closed */
    seg_destroy(s);
}

/* The pages a segment directory gets, by the mount that holds it: the
 * longest mount point above it wins, a mount point is matched at a '/'
 * boundary only, and a tmpfs without huge= (or huge=never) is the 4 KiB
 * case the node warns about. The directories are real (the path is
 * resolved); the mounts text is given. */
static void test_mount_pages(void **state)
{
    char a[300], ab[300], sib[300], mounts[2048], out[96];
    (void)state;
    snprintf(a, sizeof(a), "%s/m", g_dir);
    snprintf(ab, sizeof(ab), "%s/m/b", g_dir);
    snprintf(sib, sizeof(sib), "%s/mx", g_dir);
    assert_true(mkdir(g_dir, 0700) == 0 || errno == EEXIST); /* the group's scratch */
    assert_int_equal(mkdir(a, 0700), 0);
    assert_int_equal(mkdir(ab, 0700), 0);
    assert_int_equal(mkdir(sib, 0700), 0);

    snprintf(mounts, sizeof(mounts),
             "/dev/vda1 / ext4 rw,relatime 0 0\n"
             "tmpfs %s tmpfs rw,nosuid,size=1048576k 0 0\n"
             "tmpfs %s tmpfs rw,size=4g,huge=within_size,mode=700 0 0\n",
             a, ab);
    assert_int_equal(seg_mount_pages(mounts, a, out, sizeof(out)), 1);
    assert_string_equal(out, "tmpfs, 4 KiB pages");
    assert_int_equal(seg_mount_pages(mounts, ab, out, sizeof(out)), 0); /* the nearer mount */
    assert_string_equal(out, "tmpfs, huge=within_size");
    assert_int_equal(seg_mount_pages(mounts, sib, out, sizeof(out)), 0); /* m is not above mx */
    assert_string_equal(out, "ext4");

    snprintf(mounts, sizeof(mounts), "tmpfs / tmpfs rw,huge=never 0 0\n");
    assert_int_equal(seg_mount_pages(mounts, sib, out, sizeof(out)), 1);
    assert_string_equal(out, "tmpfs, 4 KiB pages");
    snprintf(mounts, sizeof(mounts), "tmpfs /elsewhere tmpfs rw 0 0\nnot a mount line\n");
    assert_int_equal(seg_mount_pages(mounts, a, out, sizeof(out)), SMP_ENOTFOUND);
    assert_string_equal(out, "?");
    assert_int_equal(seg_mount_pages(mounts, "/nonexistent/wm-seg", out, sizeof(out)),
                     SMP_ENOTFOUND);

    /* this machine's own mounts: some mount holds the directory */
    assert_true(seg_mount_pages(NULL, a, out, sizeof(out)) >= 0);
    assert_string_not_equal(out, "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segment_survives_reopen),
        cmocka_unit_test(test_segment_survives_sigkill),
        cmocka_unit_test(test_smaller_file_is_grown_in_place),
        cmocka_unit_test(test_larger_file_is_cut_only_by_seg_shrink),
        cmocka_unit_test(test_prefault_keeps_every_byte),
        cmocka_unit_test(test_prefault_stops_at_a_cut_and_at_close),
        cmocka_unit_test(test_second_opener_is_refused),
        cmocka_unit_test(test_lock_released_meanwhile_is_taken),
        cmocka_unit_test(test_foreign_or_open_file_is_refused),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_bad_ids),
        cmocka_unit_test(test_client_mapping_shares_bytes),
        cmocka_unit_test(test_client_mapping_prefaults_each_page_once),
        cmocka_unit_test(test_mount_pages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
