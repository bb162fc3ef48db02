/* test_node_cold.c -- the cold tier: persist, load, delete, inventory.
 *
 * Real files in a scratch directory under /tmp. A persisted replica loads
 * back verified; a persist whose bytes do not match the expected checksum
 * leaves nothing behind; a corrupted file (data, header, truncation) is
 * detected on load and never served; crash leftovers (temporary files) are
 * removed by the inventory; names from the network cannot leave the
 * directory; a FIFO under a cold name is refused at once, a directory left
 * alone. A batch of persists gives each its own result and fsyncs the
 * directory once (fsync is wrapped to count the directory's). */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "node_cold.h"

#define BIG ((5u << 20) + 123) /* more than one persist chunk */

static int g_dir_fsyncs; /* fsync calls on a directory so far */

int __real_fsync(int fd);
int __wrap_fsync(int fd)
{
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) g_dir_fsyncs++;
    return __real_fsync(fd);
}

static char g_dir[256];
static cold_tier *g_ct;
static uint8_t *g_data;
static uint8_t g_sha[32];

static int setup(void **state)
{
    char err[256];
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/wm-test-cold-%d", (int)getpid());
    if (cold_open(g_dir, &g_ct, err, sizeof(err)) != SMP_OK)
        return -1;
    g_data = malloc(BIG);
    if (g_data == NULL)
        return -1;
    for (size_t i = 0; i < BIG; i++)
        g_data[i] = (uint8_t)((i * 2654435761u) >> 13);
    EVP_Digest(g_data, BIG, g_sha, NULL, EVP_sha256(), NULL);
    return 0;
}

static int teardown(void **state)
{
    char cmd[512];
    (void)state;
    cold_close(g_ct);
    free(g_data);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Number of directory entries whose name ends with suffix. */
static int count_suffix(const char *suffix)
{
    int n = 0;
    struct dirent *de;
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name), s = strlen(suffix);
        if (l >= s && strcmp(de->d_name + l - s, suffix) == 0)
            n++;
    }
    closedir(d);
    return n;
}

static void persist_ok(const char *key, const uint8_t *data, uint64_t len, const uint8_t *sha,
                       char name[COLD_NAME_MAX])
{
    char err[512];
    int rc = cold_persist(g_ct, key, data, len, sha, 0, name, err, sizeof(err));
    if (rc != SMP_OK)
        print_error("persist: %s\n", err);
    assert_int_equal(rc, SMP_OK);
}

/* Persist then load: same bytes, named after key and content, no tmp left. */
static void test_persist_and_load(void **state)
{
    char name[COLD_NAME_MAX], expect[COLD_NAME_MAX], path[512], err[512];
    uint8_t *back = malloc(BIG);
    struct stat st;
    cold_entry e;
    char kb[COLD_KEY_MAX + 1], nb[COLD_NAME_MAX];
    (void)state;
    assert_non_null(back);
    persist_ok("k/one", g_data, BIG, g_sha, name);
    assert_int_equal(cold_name_for("k/one", g_sha, expect), SMP_OK);
    assert_string_equal(name, expect);
    assert_int_equal(cold_path_for(g_ct, name, path, sizeof(path)), SMP_OK);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, COLD_HEADER_BYTES + (uint64_t)BIG);
    assert_int_equal(count_suffix(COLD_TMP_SUFFIX), 0);

    assert_int_equal(cold_load(g_ct, path, "k/one", back, BIG, g_sha, err, sizeof(err)), SMP_OK);
    assert_memory_equal(back, g_data, BIG);
    assert_int_equal(cold_stat(g_ct, name, &e, kb, nb), SMP_OK);
    assert_string_equal(e.key, "k/one");
    assert_int_equal(e.length, BIG);
    assert_memory_equal(e.sha256, g_sha, 32);

    /* persisting the same content again lands on the same file */
    persist_ok("k/one", g_data, BIG, g_sha, name);
    assert_string_equal(name, expect);
    /* and the same key with other content gets another file */
    {
        uint8_t sha2[32];
        EVP_Digest(g_data, 1000, sha2, NULL, EVP_sha256(), NULL);
        persist_ok("k/one", g_data, 1000, sha2, name);
        assert_string_not_equal(name, expect);
        assert_int_equal(cold_delete(g_ct, name), SMP_OK);
    }
    /* with a second pass from the device */
    assert_int_equal(cold_persist(g_ct, "k/one", g_data, BIG, g_sha, COLD_VERIFY_FROM_DISK, name,
                                  err, sizeof(err)), SMP_OK);
    assert_int_equal(cold_delete(g_ct, name), SMP_OK);
    assert_int_equal(cold_delete(g_ct, name), SMP_ENOTFOUND);
    free(back);
}

/* A source whose bytes do not hash to the expected checksum is not
 * persisted: no final file, no temporary file. */
static void test_persist_mismatch_leaves_nothing(void **state)
{
    char name[COLD_NAME_MAX], err[512];
    uint8_t bad[32];
    (void)state;
    memcpy(bad, g_sha, 32);
    bad[0] ^= 1;
    assert_int_equal(cold_persist(g_ct, "k/bad", g_data, BIG, bad, 0, name, err, sizeof(err)),
                     SMP_EPROTO);
    assert_non_null(strstr(err, "SHA-256"));
    assert_int_equal(count_suffix(COLD_SUFFIX), 0);
    assert_int_equal(count_suffix(COLD_TMP_SUFFIX), 0);
    assert_int_equal(cold_persist(g_ct, "", g_data, 10, g_sha, 0, name, err, sizeof(err)),
                     SMP_EINVAL);
}

/* A write that fails midway (the file size limit stands in for a full disk)
 * stops the read-back thread and leaves neither a final nor a temporary
 * file. */
static void test_failed_write_leaves_nothing(void **state)
{
    struct rlimit old, lim;
    char name[COLD_NAME_MAX], err[512];
    int rc;
    (void)state;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = COLD_HEADER_BYTES + (3u << 20) + 100; /* inside the first chunk */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    rc = cold_persist(g_ct, "k/full", g_data, BIG, g_sha, 0, name, err, sizeof(err));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(rc, SMP_EIO);
    assert_int_equal(count_suffix(COLD_SUFFIX), 0);
    assert_int_equal(count_suffix(COLD_TMP_SUFFIX), 0);

    lim.rlim_cur = COLD_HEADER_BYTES + (4u << 20) + 100; /* inside the second chunk */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    rc = cold_persist(g_ct, "k/full", g_data, BIG, g_sha, 0, name, err, sizeof(err));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(rc, SMP_EIO);
    assert_int_equal(count_suffix(COLD_SUFFIX), 0);
    assert_int_equal(count_suffix(COLD_TMP_SUFFIX), 0);
    signal(SIGXFSZ, SIG_DFL);
}

/* Flip one byte of a file at off (from the start of the file). */
static void flip_byte(const char *path, off_t off)
{
    uint8_t b;
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

/* Corrupted data, a corrupted header and a truncated file are all detected
 * on load; wrong key, length or expected checksum are refused too. */
static void test_corrupted_file_is_never_served(void **state)
{
    char name[COLD_NAME_MAX], path[512], err[512];
    uint8_t *back = malloc(BIG);
    uint8_t other[32];
    (void)state;
    assert_non_null(back);
    persist_ok("k/corrupt", g_data, BIG, g_sha, name);
    assert_int_equal(cold_path_for(g_ct, name, path, sizeof(path)), SMP_OK);

    assert_int_equal(cold_load(g_ct, name, "k/other", back, BIG, g_sha, err, sizeof(err)),
                     SMP_EINVAL);
    assert_int_equal(cold_load(g_ct, name, "k/corrupt", back, BIG - 1, g_sha, err, sizeof(err)),
                     SMP_ERANGE);
    memcpy(other, g_sha, 32);
    other[31] ^= 1;
    assert_int_equal(cold_load(g_ct, name, "k/corrupt", back, BIG, other, err, sizeof(err)),
                     SMP_EPROTO);

    flip_byte(path, COLD_HEADER_BYTES + BIG / 2);
    assert_int_equal(cold_load(g_ct, name, "k/corrupt", back, BIG, g_sha, err, sizeof(err)),
                     SMP_EPROTO);
    assert_non_null(strstr(err, "corrupted"));
    /* The header still reads right: only a deep check (fsck --deep) finds it. */
    cold_entry e;
    char key_buf[COLD_KEY_MAX + 1], name_buf[COLD_NAME_MAX];
    assert_int_equal(cold_check(g_ct, name, 0, &e, key_buf, name_buf), SMP_OK);
    assert_string_equal(e.key, "k/corrupt");
    assert_int_equal(cold_check(g_ct, name, 1, &e, key_buf, name_buf), SMP_EPROTO);
    assert_int_equal(e.status, SMP_EPROTO);
    assert_null(e.key);
    assert_int_equal(cold_load(g_ct, name, NULL, back, BIG, NULL, err, sizeof(err)), SMP_EPROTO);
    flip_byte(path, COLD_HEADER_BYTES + BIG / 2);
    assert_int_equal(cold_load(g_ct, name, "k/corrupt", back, BIG, g_sha, err, sizeof(err)), SMP_OK);

    flip_byte(path, 20); /* the data length in the header */
    assert_int_equal(cold_load(g_ct, name, "k/corrupt", back, BIG, g_sha, err, sizeof(err)),
                     SMP_EPROTO);
    flip_byte(path, 20);
    assert_int_equal(truncate(path, COLD_HEADER_BYTES + BIG - 1), 0);
    assert_int_equal(cold_load(g_ct, name, "k/corrupt", back, BIG, g_sha, err, sizeof(err)),
                     SMP_EPROTO);
    assert_int_equal(truncate(path, 100), 0);
    assert_int_equal(cold_load(g_ct, name, "k/corrupt", back, BIG, g_sha, err, sizeof(err)),
                     SMP_EPROTO);
    assert_int_equal(cold_delete(g_ct, path), SMP_OK);
    free(back);
}

/* cold_verify, what a node runs before the master releases the memory a
 * cold file stands in for: an intact file of the key, length and SHA-256
 * asked passes; another key, length or SHA-256, a data byte rotted under
 * an intact header, a missing file, a bad name and no key or SHA-256 each
 * fail with the code the master tells apart and a message naming the file;
 * nothing is changed (the file loads again once the byte is put back). */
static void test_verify_hashes_the_whole_file(void **state)
{
    char name[COLD_NAME_MAX], path[512], err[512], missing[COLD_NAME_MAX];
    uint8_t other[32];
    (void)state;
    persist_ok("k/verify", g_data, BIG, g_sha, name);
    assert_int_equal(cold_path_for(g_ct, name, path, sizeof(path)), SMP_OK);
    assert_int_equal(cold_verify(g_ct, name, "k/verify", BIG, g_sha, err, sizeof(err)), SMP_OK);
    assert_int_equal(cold_verify(g_ct, path, "k/verify", BIG, g_sha, err, sizeof(err)), SMP_OK);

    assert_int_equal(cold_verify(g_ct, name, "k/other", BIG, g_sha, err, sizeof(err)), SMP_EINVAL);
    assert_non_null(strstr(err, "holds key k/verify, not k/other"));
    assert_int_equal(cold_verify(g_ct, name, "k/verify", BIG + 1, g_sha, err, sizeof(err)), SMP_ERANGE);
    memcpy(other, g_sha, 32);
    other[0] ^= 1;
    assert_int_equal(cold_verify(g_ct, name, "k/verify", BIG, other, err, sizeof(err)), SMP_EPROTO);
    assert_non_null(strstr(err, "recorded SHA-256 differs"));
    assert_int_equal(cold_verify(g_ct, name, NULL, BIG, g_sha, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(cold_verify(g_ct, name, "k/verify", BIG, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(cold_verify(g_ct, "../passwd", "k/verify", BIG, g_sha, err, sizeof(err)), SMP_EINVAL);
    assert_non_null(strstr(err, "is not a cold file of"));
    assert_int_equal(cold_name_for("k/missing", g_sha, missing), SMP_OK);
    assert_int_equal(cold_verify(g_ct, missing, "k/missing", BIG, g_sha, err, sizeof(err)), SMP_ENOTFOUND);

    flip_byte(path, COLD_HEADER_BYTES + BIG - 1); /* the last byte: every byte is read */
    assert_int_equal(cold_verify(g_ct, name, "k/verify", BIG, g_sha, err, sizeof(err)), SMP_EPROTO);
    assert_non_null(strstr(err, name));
    assert_non_null(strstr(err, "data does not match its SHA-256"));
    flip_byte(path, COLD_HEADER_BYTES + BIG - 1);
    assert_int_equal(cold_verify(g_ct, name, "k/verify", BIG, g_sha, err, sizeof(err)), SMP_OK);
    assert_int_equal(cold_delete(g_ct, name), SMP_OK);
}

typedef struct seen {
    int ok;
    int corrupt;
    char key[64];
} seen;

static int visit(void *arg, const cold_entry *e)
{
    seen *s = arg;
    if (e->status == SMP_OK) {
        s->ok++;
        snprintf(s->key, sizeof(s->key), "%s", e->key);
    } else {
        s->corrupt++;
    }
    return 0;
}

/* Something in the cold directory that is not a regular file but has a
 * cold file's name (here a FIFO, whose open would wait for a writer) is
 * refused at once as corrupt, by the check a reader's complaint, fsck and
 * the inventory run, and by a read: it never holds the thread that asked.
 * SIGALRM fails the test if any of them waits. */
static void test_a_fifo_is_not_a_cold_file(void **state)
{
    char name[COLD_NAME_MAX], path[512], key_buf[COLD_KEY_MAX + 1], name_buf[COLD_NAME_MAX];
    char err[256];
    uint8_t sha[32] = { 0 }, buf[16];
    cold_entry e;
    cold_inventory_stats st;
    seen s;
    uint64_t len;
    int fd = -1;
    (void)state;
    assert_int_equal(cold_name_for("k/fifo", sha, name), SMP_OK);
    assert_int_equal(cold_path_for(g_ct, name, path, sizeof(path)), SMP_OK);
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(20);
    assert_int_equal(cold_check(g_ct, name, 0, &e, key_buf, name_buf), SMP_EPROTO);
    assert_int_equal(cold_check(g_ct, name, 1, &e, key_buf, name_buf), SMP_EPROTO);
    assert_int_equal(cold_open_data(g_ct, name, &fd, &len), SMP_EPROTO);
    assert_int_equal(fd, -1);
    assert_int_equal(cold_load(g_ct, name, NULL, buf, sizeof(buf), NULL, err, sizeof(err)),
                     SMP_EPROTO);
    memset(&s, 0, sizeof(s));
    assert_int_equal(cold_inventory(g_ct, 0, 1, visit, &s, &st), SMP_OK);
    assert_int_equal(s.corrupt, 1);
    alarm(0);
    assert_int_equal(unlink(path), 0);
}

/* A directory under a cold file's name (made by hand: the tier never makes
 * one) is no cold file: the inventory and the name listing fsck pages
 * through leave it alone, counted ignored -- neither an orphan nor a
 * corrupt replica, since no delete could remove it and fsck --repair would
 * fail on it every time -- and what it holds stays. */
static void test_a_directory_is_not_a_cold_file(void **state)
{
    char name[COLD_NAME_MAX], path[512], inner[600];
    uint8_t sha[32] = { 0 };
    cold_inventory_stats before, after;
    seen s0, s1;
    char **v = NULL;
    size_t n = 0;
    (void)state;
    memset(&s0, 0, sizeof(s0));
    assert_int_equal(cold_inventory(g_ct, 3600 * 1000, 1, visit, &s0, &before), SMP_OK);
    assert_int_equal(cold_name_for("k/directory", sha, name), SMP_OK);
    assert_int_equal(cold_path_for(g_ct, name, path, sizeof(path)), SMP_OK);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(inner, sizeof(inner), "%s/keep", path);
    FILE *fp = fopen(inner, "w");
    assert_non_null(fp);
    assert_int_equal(fclose(fp), 0);

    memset(&s1, 0, sizeof(s1));
    assert_int_equal(cold_inventory(g_ct, 3600 * 1000, 1, visit, &s1, &after), SMP_OK);
    assert_int_equal(after.files, before.files);
    assert_int_equal(after.corrupt, before.corrupt);
    assert_int_equal(after.ignored, before.ignored + 1);
    assert_int_equal(s1.corrupt, s0.corrupt);
    assert_int_equal(s1.ok, s0.ok);
    assert_int_equal(cold_list_names(g_ct, 3600 * 1000, &v, &n), SMP_OK);
    for (size_t i = 0; i < n; i++) assert_string_not_equal(v[i], name);
    cold_names_free(v, n);
    assert_int_equal(access(inner, F_OK), 0);
    assert_int_equal(unlink(inner), 0);
    assert_int_equal(rmdir(path), 0);
}

/* The inventory lists cold files with their checksums, removes crash
 * leftovers (temporary files) older than the threshold, leaves other files
 * alone, and with a deep check finds corrupted data. */
static void test_inventory_and_crash_leftovers(void **state)
{
    char name[COLD_NAME_MAX], path[512], tmp[512], other[512], err[256];
    uint8_t sha[32];
    cold_inventory_stats st;
    seen s;
    int fd;
    (void)state;
    EVP_Digest(g_data, 4096, sha, NULL, EVP_sha256(), NULL);
    persist_ok("k/inv", g_data, 4096, sha, name);
    assert_int_equal(cold_path_for(g_ct, name, path, sizeof(path)), SMP_OK);

    /* a persist that crashed midway left its temporary file */
    snprintf(tmp, sizeof(tmp), "%s/%s.0123456789abcdef%s", g_dir, name, COLD_TMP_SUFFIX);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, g_data, 1000), 1000);
    close(fd);
    snprintf(other, sizeof(other), "%s/README", g_dir);
    fd = open(other, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(fd);

    /* a young temporary file may be a persist in progress: kept */
    memset(&s, 0, sizeof(s));
    assert_int_equal(cold_inventory(g_ct, 3600 * 1000, 0, visit, &s, &st), SMP_OK);
    assert_int_equal(s.ok, 1);
    assert_string_equal(s.key, "k/inv");
    assert_int_equal(st.files, 1);
    assert_int_equal(st.bytes, 4096);
    assert_int_equal(st.tmps_kept, 1);
    assert_int_equal(st.tmps_removed, 0);
    assert_int_equal(st.ignored, 1);
    assert_int_equal(access(tmp, F_OK), 0);

    /* after a restart every temporary file is a leftover: removed */
    memset(&s, 0, sizeof(s));
    assert_int_equal(cold_inventory(g_ct, 0, 0, visit, &s, &st), SMP_OK);
    assert_int_equal(st.tmps_removed, 1);
    assert_int_not_equal(access(tmp, F_OK), 0);
    assert_int_equal(access(other, F_OK), 0);

    /* corrupted data: the header still reads, the deep check catches it */
    flip_byte(path, COLD_HEADER_BYTES + 10);
    memset(&s, 0, sizeof(s));
    assert_int_equal(cold_inventory(g_ct, 0, 0, visit, &s, &st), SMP_OK);
    assert_int_equal(s.ok, 1);
    memset(&s, 0, sizeof(s));
    assert_int_equal(cold_inventory(g_ct, 0, 1, visit, &s, &st), SMP_OK);
    assert_int_equal(s.ok, 0);
    assert_int_equal(s.corrupt, 1);
    assert_int_equal(st.corrupt, 1);
    /* a broken header is reported without a deep check */
    flip_byte(path, COLD_HEADER_BYTES + 10);
    flip_byte(path, 60);
    memset(&s, 0, sizeof(s));
    assert_int_equal(cold_inventory(g_ct, 0, 0, visit, &s, &st), SMP_OK);
    assert_int_equal(s.corrupt, 1);
    assert_int_equal(cold_delete(g_ct, name), SMP_OK);
    unlink(other);
    (void)err;
}

/* cold_list_names (fsck's paged SCAN): the .cold names only, sorted
 * bytewise, headers not read (a corrupt file is listed); temporary files
 * are kept young and removed stale, as by cold_inventory; other entries are
 * left alone. */
static void test_list_names_sorted(void **state)
{
    char names[3][COLD_NAME_MAX], tmp[512], other[512], path[512];
    const char *keys[3] = {"k/list/a", "k/list/b", "k/list/c"};
    uint8_t sha[32];
    char **v = NULL;
    size_t n = 0;
    int fd;
    (void)state;
    for (int i = 0; i < 3; i++) {
        EVP_Digest(g_data, 100 + (size_t)i, sha, NULL, EVP_sha256(), NULL);
        persist_ok(keys[i], g_data, 100 + (uint64_t)i, sha, names[i]);
    }
    assert_int_equal(cold_path_for(g_ct, names[1], path, sizeof(path)), SMP_OK);
    flip_byte(path, 60); /* a broken header: still listed */
    snprintf(tmp, sizeof(tmp), "%s/%s.0123456789abcdef%s", g_dir, names[0], COLD_TMP_SUFFIX);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    close(fd);
    snprintf(other, sizeof(other), "%s/README", g_dir);
    fd = open(other, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(fd);

    assert_int_equal(cold_list_names(g_ct, 3600 * 1000, &v, &n), SMP_OK);
    assert_int_equal(n, 3);
    for (size_t i = 1; i < n; i++) assert_true(strcmp(v[i - 1], v[i]) < 0);
    for (int i = 0; i < 3; i++) {
        int found = 0;
        for (size_t k = 0; k < n; k++) found |= strcmp(v[k], names[i]) == 0;
        assert_true(found);
    }
    cold_names_free(v, n);
    assert_int_equal(access(tmp, F_OK), 0);   /* young: kept */
    assert_int_equal(cold_list_names(g_ct, 0, &v, &n), SMP_OK);
    assert_int_equal(n, 3);
    cold_names_free(v, n);
    assert_int_not_equal(access(tmp, F_OK), 0); /* stale: removed */
    assert_int_equal(access(other, F_OK), 0);

    for (int i = 0; i < 3; i++) assert_int_equal(cold_delete(g_ct, names[i]), SMP_OK);
    assert_int_equal(cold_list_names(g_ct, 0, &v, &n), SMP_OK);
    assert_int_equal(n, 0);
    cold_names_free(v, n);
    unlink(other);
}

/* Names and paths that would leave the directory, or touch a temporary
 * file, are refused; a full path inside the directory is accepted. */
static void test_names_cannot_escape(void **state)
{
    char name[COLD_NAME_MAX], path[512];
    char bad[6][512];
    uint8_t sha[32] = { 0 };
    (void)state;
    assert_int_equal(cold_name_for("x", sha, name), SMP_OK);
    snprintf(bad[0], sizeof(bad[0]), "../%s", name);
    snprintf(bad[1], sizeof(bad[1]), "/etc/%s", name);
    snprintf(bad[2], sizeof(bad[2]), "%s/../%s", g_dir, name);
    snprintf(bad[3], sizeof(bad[3]), "%s.0123456789abcdef.tmp", name);
    snprintf(bad[4], sizeof(bad[4]), "%s", "passwd");
    snprintf(bad[5], sizeof(bad[5]), "%.64s.COLD", name);
    for (int i = 0; i < 6; i++) {
        char out[COLD_NAME_MAX];
        assert_int_equal(cold_resolve(g_ct, bad[i], out), SMP_EINVAL);
        assert_int_equal(cold_delete(g_ct, bad[i]), SMP_EINVAL);
    }
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    {
        char out[COLD_NAME_MAX];
        assert_int_equal(cold_resolve(g_ct, path, out), SMP_OK);
        assert_string_equal(out, name);
    }
    assert_int_equal(cold_delete(g_ct, path), SMP_ENOTFOUND);
}

/* An empty object persists and loads. */
static void test_empty_object(void **state)
{
    char name[COLD_NAME_MAX], err[256];
    uint8_t sha[32];
    (void)state;
    EVP_Digest("", 0, sha, NULL, EVP_sha256(), NULL);
    persist_ok("k/empty", NULL, 0, sha, name);
    assert_int_equal(cold_load(g_ct, name, "k/empty", NULL, 0, sha, err, sizeof(err)), SMP_OK);
    assert_int_equal(cold_delete(g_ct, name), SMP_OK);
}

/* A batch of 20 small persists: 18 made durable and verified, each loads
 * back; the one whose bytes do not match its SHA-256 and the one with a bad
 * key fail alone and leave no file; the directory is fsynced once for the
 * batch, where 18 persists one by one fsync it 18 times. */
static void test_batch_shares_the_directory_sync(void **state)
{
    (void)state;
    enum { N = 20 };
    cold_item it[N];
    char keys[N][32];
    uint8_t sha[N][32], bad[32];
    memset(bad, 0xab, sizeof(bad));
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "batch/%02d", i);
        EVP_Digest(g_data + i, 100, sha[i], NULL, EVP_sha256(), NULL);
        it[i] = (cold_item){.key = keys[i], .data = g_data + i, .len = 100, .sha256 = sha[i]};
    }
    it[5].sha256 = bad;
    it[9].key = "";
    int before = g_dir_fsyncs, cold_before = count_suffix(".cold");
    assert_int_equal(cold_persist_batch(g_ct, it, N, 0), SMP_EPROTO);
    assert_int_equal(g_dir_fsyncs - before, 1);
    assert_int_equal(it[5].rc, SMP_EPROTO);
    assert_non_null(strstr(it[5].err, "do not match"));
    assert_int_equal(it[9].rc, SMP_EINVAL);
    assert_int_equal(count_suffix(".tmp"), 0);
    assert_int_equal(count_suffix(".cold"), cold_before + N - 2);
    uint8_t back[100];
    char err[512];
    for (int i = 0; i < N; i++) {
        if (i == 5 || i == 9) continue;
        assert_int_equal(it[i].rc, SMP_OK);
        assert_int_equal(cold_load(g_ct, it[i].name, keys[i], back, 100, sha[i], err, sizeof(err)), SMP_OK);
        assert_memory_equal(back, g_data + i, 100);
        assert_int_equal(cold_delete(g_ct, it[i].name), SMP_OK);
    }
    /* the same persists one by one: a directory fsync each */
    before = g_dir_fsyncs;
    char name[COLD_NAME_MAX];
    for (int i = 0; i < N; i++) {
        if (i == 5 || i == 9) continue;
        persist_ok(keys[i], g_data + i, 100, sha[i], name);
    }
    assert_int_equal(g_dir_fsyncs - before, N - 2);
    /* too many, or none: refused, nothing done */
    assert_int_equal(cold_persist_batch(g_ct, it, 0, 0), SMP_EINVAL);
    assert_int_equal(cold_persist_batch(g_ct, it, COLD_BATCH_MAX + 1, 0), SMP_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_persist_and_load),
        cmocka_unit_test(test_persist_mismatch_leaves_nothing),
        cmocka_unit_test(test_failed_write_leaves_nothing),
        cmocka_unit_test(test_corrupted_file_is_never_served),
        cmocka_unit_test(test_verify_hashes_the_whole_file),
        cmocka_unit_test(test_inventory_and_crash_leftovers),
        cmocka_unit_test(test_a_fifo_is_not_a_cold_file),
        cmocka_unit_test(test_a_directory_is_not_a_cold_file),
        cmocka_unit_test(test_list_names_sorted),
        cmocka_unit_test(test_names_cannot_escape),
        cmocka_unit_test(test_empty_object),
        cmocka_unit_test(test_batch_shares_the_directory_sync),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
