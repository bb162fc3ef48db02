/* test_hot_get_mapping.c -- a loader that gets a HOT revision again and
 * again through one store, co-located with the node, on a real master.
 *
 * The store keeps its mapping of the node's segment file between gets, and
 * the mapping remembers which pages a get made present in its page tables
 * (seg_map_prefault): a repeated get walks none of them again
 * (weight_get_stats.prefaulted_bytes is 0), a second store's mapping walks
 * them once for itself. When the segment file is replaced while the master
 * is down (a new file with the same bytes at the same path), the store maps
 * the new file and walks its pages again, and reads through it: a byte
 * altered in the new file fails the get with DIGEST_MISMATCH although the
 * retired mapping of the old file still holds the right bytes. A segment
 * that grew (node.segment_bytes raised, master restarted) is mapped again
 * the same way. A zero-copy view (weight_get_mapped) has its objects
 * verified ahead of use on the store's threads (weight_mapped_verify). The
 * leases of a store's views and gets are renewed by one connection and
 * thread of the store, which a view held past weight_store_close keeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "weight_check.h"
#include "weight_model.h"

#define N_T 8
#define TOTAL (N_T * 4096ull)

typedef struct fixture {
    hx_master m;
    wx_tensor t[N_T];
    weight_identity id;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL || hx_init(&f->m, "hotmap", NULL) < 0 || hx_start(&f->m, 20000) < 0) return -1;
    for (size_t i = 0; i < N_T; i++) {
        static char names[N_T][16];
        snprintf(names[i], sizeof names[i], "w%zu", i);
        f->t[i].name = names[i];
        f->t[i].shape[0] = 32;
        f->t[i].shape[1] = 32;
    }
    wx_model_fill(f->t, N_T, 7);
    weight_identity_set(&f->id, NULL, "llm", "loader", "v1", 1);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

/* The path of the embedded node's segment file (the one *.seg under the
 * test's shm directory) into path. */
static void segment_file(const fixture *f, char *path, size_t cap)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/shm", f->m.dir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    path[0] = '\0';
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".seg") == 0)
            assert_true(snprintf(path, cap, "%s/%s", dir, e->d_name) < (int)cap);
    }
    closedir(d);
    assert_true(path[0] != '\0');
}

/* Replace the file at path by a new file (another inode) with the same
 * bytes, as the one who owns it could while the master is down. */
static void replace_file(const char *path)
{
    size_t len = 0;
    uint8_t *bytes = hx_read_file(path, &len);
    assert_non_null(bytes);
    char tmp[900];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, bytes, len), (ssize_t)len);
    assert_int_equal(close(fd), 0);
    assert_int_equal(rename(tmp, path), 0);
    free(bytes);
}

/* Flip the first byte of the first occurrence of what[0, len) in the file
 * at path, in place (the node's mapping sees it); its offset. */
static off_t flip_byte(const char *path, const uint8_t *what, size_t len)
{
    size_t n = 0;
    uint8_t *bytes = hx_read_file(path, &n);
    assert_non_null(bytes);
    uint8_t *at = memmem(bytes, n, what, len);
    assert_non_null(at);
    uint8_t b = (uint8_t)(at[0] ^ 0x5a);
    off_t off = at - bytes;
    free(bytes);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
    assert_int_equal(close(fd), 0);
    return off;
}

/* The reader that met the altered byte reported the replica: wait until
 * the master has had its node hash it and dropped it
 * (store_corrupt_reports_total{result="confirmed"}), and the revision,
 * which has no cold copy, is DEGRADED -- a replica that does not hold its
 * bytes is not read again, even once the byte is put back. */
static void wait_dropped(fixture *f, weight_store *s, const weight_identity *id)
{
    long long until = hx_now_ms() + 30000;
    while (hx_metric(&f->m, "store_corrupt_reports_total{result=\"confirmed\"}") < 1) {
        if (hx_now_ms() > until) {
            hx_print_log(&f->m);
            fail_msg("the master did not drop the replica the reader reported");
        }
        usleep(20000);
    }
    wx_wait_state(s, id, WEIGHT_DEGRADED, -1);
}

static int place_all(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    (void)ctx;
    (void)t;
    out->kind = WEIGHT_PLACE_REPLICATED;
    return 0;
}

static int provide_scratch(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                           const uint64_t *shape, uint64_t bytes, void **out)
{
    uint8_t *scratch = ctx; /* N_T x 4 KiB: a failing get's bytes are not looked at */
    (void)p;
    (void)shape;
    size_t i = (size_t)atoi(t->name + 1);
    if (i >= N_T || bytes > 4096) return WEIGHT_EINVALID_ARGUMENT;
    *out = scratch + i * 4096;
    return 0;
}

/* weight_get of the whole revision into scratch buffers; its code. */
static int try_get(weight_store *s, const weight_identity *id)
{
    static uint8_t scratch[N_T * 4096];
    weight_placement pl = {place_all, NULL};
    weight_bindings bd = {NULL, 0, provide_scratch, scratch};
    return weight_get(s, id, &pl, &bd, NULL);
}

/* Wait (up to 20 s) until a restarted master has the revision's replicas
 * back from its node's inventory (weight_is_exist: READY and readable). */
static void wait_readable(weight_store *s, const weight_identity *id)
{
    for (int i = 0; i < 400; i++) {
        int exists = 0;
        if (weight_is_exist(s, id, &exists) == 0 && exists) return;
        usleep(50 * 1000);
    }
    fail_msg("%s is not readable 20 s after the restart", id->revision);
}

/* A repeated get through one store walks no page twice: the first get
 * makes every source page present, the second populates nothing and reads
 * the same bytes through the same mapping, every byte verified. Another
 * store has its own mapping and walks the pages once for itself. */
static void test_repeated_get_walks_the_pages_once(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_get_stats st;
    wx_put_model(s, &f->id, f->t, N_T);

    wx_get_and_compare_stats(s, &f->id, f->t, N_T, &st);
    assert_int_equal(st.local_bytes, TOTAL);
    assert_true(st.prefaulted_bytes >= TOTAL);
    for (int i = 0; i < 3; i++) {
        wx_get_and_compare_stats(s, &f->id, f->t, N_T, &st);
        assert_int_equal(st.local_bytes, TOTAL);
        assert_int_equal(st.verified_bytes, TOTAL);
        assert_int_equal(st.prefaulted_bytes, 0);
    }

    weight_store *other = wx_open_store(&f->m);
    wx_get_and_compare_stats(other, &f->id, f->t, N_T, &st);
    assert_true(st.prefaulted_bytes >= TOTAL);
    wx_get_and_compare_stats(other, &f->id, f->t, N_T, &st);
    assert_int_equal(st.prefaulted_bytes, 0);
    weight_store_close(other);
    weight_store_close(s);
}

/* A segment file replaced while the master was down (a new file with the
 * same bytes) is mapped anew: the next get walks its pages once for the new
 * mapping and reads every byte right, the one after walks none. The reads
 * then go through the new file: a byte altered in it fails the get with
 * DIGEST_MISMATCH (the retired mapping of the old file still holds the
 * right bytes), and the replica the get reported is dropped
 * (wait_dropped). */
static void test_replaced_segment_is_mapped_again(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_get_stats st;
    char path[800];
    wx_put_model(s, &f->id, f->t, N_T);
    wx_get_and_compare_stats(s, &f->id, f->t, N_T, &st);
    wx_get_and_compare_stats(s, &f->id, f->t, N_T, &st);
    assert_int_equal(st.prefaulted_bytes, 0);
    segment_file(f, path, sizeof path);

    assert_int_equal(hx_stop(&f->m), 0);
    replace_file(path);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    wait_readable(s, &f->id);
    wx_get_and_compare_stats(s, &f->id, f->t, N_T, &st);
    assert_int_equal(st.local_bytes, TOTAL);
    assert_int_equal(st.verified_bytes, TOTAL);
    assert_true(st.prefaulted_bytes >= TOTAL);
    wx_get_and_compare_stats(s, &f->id, f->t, N_T, &st);
    assert_int_equal(st.prefaulted_bytes, 0);

    flip_byte(path, f->t[3].data, sizeof f->t[3].data);
    int rc = try_get(s, &f->id);
    if (rc != WEIGHT_EDIGEST_MISMATCH)
        fail_msg("a get after a byte of the new file changed: %s (%s)", weight_error_name(rc),
                 weight_store_last_error(s));
    assert_non_null(strstr(weight_store_last_error(s), "do not match the manifest's checksum"));
    wait_dropped(f, s, &f->id);
    weight_store_close(s);
}

/* A segment grown by a restart with a larger node.segment_bytes is mapped
 * again (the old mapping ends short of the new tail): the next get walks
 * its pages once and reads every byte right. */
static void test_grown_segment_is_mapped_again(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_get_stats st;
    char cfg[700];
    wx_put_model(s, &f->id, f->t, N_T);
    wx_get_and_compare_stats(s, &f->id, f->t, N_T, &st);
    wx_get_and_compare_stats(s, &f->id, f->t, N_T, &st);
    assert_int_equal(st.prefaulted_bytes, 0);

    assert_int_equal(hx_stop(&f->m), 0);
    snprintf(cfg, sizeof cfg, "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: %llu\n",
             f->m.dir, 96ull << 20);
    assert_int_equal(hx_reconfigure(&f->m, cfg), 0);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    wait_readable(s, &f->id);
    wx_get_and_compare_stats(s, &f->id, f->t, N_T, &st);
    assert_int_equal(st.local_bytes, TOTAL);
    assert_true(st.prefaulted_bytes >= TOTAL);
    wx_get_and_compare_stats(s, &f->id, f->t, N_T, &st);
    assert_int_equal(st.prefaulted_bytes, 0);
    weight_store_close(s);
}

/* -- one object larger than a job ------------------------------------------------ */

#define BIG_ROWS 5120ull
#define BIG_COLS 4096ull                   /* BF16: 40 MiB, one object of 40 chunks */
#define BIG_BYTES (BIG_ROWS * BIG_COLS * 2)

typedef struct bigget {
    uint32_t parts, rank;                  /* split along dim 1 */
    uint8_t *buf;
    uint64_t bytes;
} bigget;

static int place_big(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    bigget *g = ctx;
    (void)t;
    *out = (weight_tensor_place){g->parts > 1 ? WEIGHT_PLACE_SPLIT : WEIGHT_PLACE_REPLICATED, 1,
                                 g->parts, g->rank};
    return 0;
}

static int provide_big(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                       const uint64_t *shape, uint64_t bytes, void **out)
{
    bigget *g = ctx;
    (void)t;
    (void)p;
    (void)shape;
    free(g->buf);
    g->buf = malloc(bytes);
    g->bytes = bytes;
    *out = g->buf;
    return g->buf != NULL ? 0 : WEIGHT_ENOMEM;
}

/* weight_get of "big" into g (split in g->parts along dim 1, part
 * g->rank); its code, statistics in *st. */
static int get_big(weight_store *s, const weight_identity *id, bigget *g, weight_get_stats *st)
{
    weight_placement pl = {place_big, g};
    weight_bindings bd = {NULL, 0, provide_big, g};
    return weight_get(s, id, &pl, &bd, st);
}

/* An object of 40 chunks read through the mapping is cut into jobs of at
 * most 16 chunks that the transfer threads share: read whole and as the
 * second half of every row (a strided placement across every part), each
 * byte is where it belongs, counted as one object with every byte
 * verified; a byte altered in chunk 35 (the third part) fails the get with
 * DIGEST_MISMATCH naming that chunk, and the replica it reported is
 * dropped (wait_dropped). */
static void test_object_larger_than_a_job_reads_in_parts(void **state)
{
    fixture *f = *state;
    weight_store *s = NULL;
    weight_writer *w = NULL;
    weight_get_stats st;
    weight_identity id;
    char err[256], path[800];
    uint64_t shape[2] = {BIG_ROWS, BIG_COLS};
    uint8_t *src = malloc(BIG_BYTES);
    assert_non_null(src);
    for (uint64_t i = 0; i < BIG_BYTES; i += 8) {
        uint64_t v = (i + 1) * 0x9E3779B97F4A7C15ull;
        memcpy(src + i, &v, 8);
    }
    assert_int_equal(weight_store_open(f->m.socket, "acme", NULL, &s, err, sizeof err), 0);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_THREADS, 2), 0);
    weight_identity_set(&id, NULL, "llm", "big", "v1", 1);
    /* HOT and MANUAL: no cold copy of the payload for a failed chunk to fall
     * back to */
    weight_policy pol = {WEIGHT_RES_HOT, 0.0, WEIGHT_MODE_MANUAL};
    CHECK(s, weight_put_begin(s, &id, &pol, &w));
    CHECK(s, weight_writer_add_tensor(w, "big", "BF16", 2, shape, src));
    CHECK(s, weight_writer_commit(w, NULL));

    bigget g = {1, 0, NULL, 0};
    CHECK(s, get_big(s, &id, &g, &st));
    assert_int_equal(g.bytes, BIG_BYTES);
    assert_memory_equal(g.buf, src, BIG_BYTES);
    assert_int_equal(st.objects, 1);
    assert_int_equal(st.local_bytes, BIG_BYTES);
    assert_int_equal(st.verified_bytes, BIG_BYTES);

    g.parts = 2;
    g.rank = 1;
    CHECK(s, get_big(s, &id, &g, &st));
    assert_int_equal(g.bytes, BIG_BYTES / 2);
    for (uint64_t r = 0; r < BIG_ROWS; r++)
        if (memcmp(g.buf + r * BIG_COLS, src + r * BIG_COLS * 2 + BIG_COLS, BIG_COLS) != 0)
            fail_msg("row %llu of the second half differs", (unsigned long long)r);
    assert_int_equal(st.objects, 1);
    assert_int_equal(st.verified_bytes, BIG_BYTES); /* every chunk, whole */

    segment_file(f, path, sizeof path);
    uint64_t at = (35ull << 20) + 4321;
    flip_byte(path, src + at, 64);
    g.parts = 1;
    g.rank = 0;
    assert_int_equal(get_big(s, &id, &g, &st), WEIGHT_EDIGEST_MISMATCH);
    assert_non_null(strstr(weight_store_last_error(s), "(chunk 35)"));
    wait_dropped(f, s, &id);
    free(g.buf);
    free(src);
    weight_store_close(s);
}

/* The index of tensor `name` in view v. */
static size_t view_index(const weight_mapped *v, const char *name)
{
    weight_mapped_tensor t;
    for (size_t i = 0; i < weight_mapped_count(v); i++)
        if (weight_mapped_get_tensor(v, i, &t) == WEIGHT_OK && strcmp(t.name, name) == 0) return i;
    fail_msg("no tensor %s in the view", name);
    return 0;
}

/* A view's objects (two: "big" of 40 chunks, "small") verified ahead of
 * use, on the store's two threads, in parts of at most 16 chunks: a view
 * verifies the large object ahead and reads it right, and the small one,
 * not asked for, on first use. A refused call (an index out of range)
 * verifies nothing: a byte altered after it, in chunk 35 of the 40-chunk
 * object (its third part), is found by the next call, and that object's
 * tensor is not handed out while the other's is, byte for byte. The view
 * reports the replica, which the master drops (wait_dropped). The verdict
 * is the view's: put back, the byte does not make that view hand the
 * tensor out, and the other tensor still reads right. */
static void test_views_are_verified_ahead_of_use(void **state)
{
    fixture *f = *state;
    weight_store *s = NULL;
    weight_writer *w = NULL;
    weight_mapped *v = NULL;
    weight_identity id;
    const void *data;
    char err[256], path[800];
    uint64_t shape[2] = {BIG_ROWS, BIG_COLS}, small_shape[1] = {2048};
    uint8_t *src = malloc(BIG_BYTES), small[4096];
    assert_non_null(src);
    for (uint64_t i = 0; i < BIG_BYTES; i += 8) {
        uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
        memcpy(src + i, &x, 8);
    }
    for (size_t i = 0; i < sizeof small; i++) small[i] = (uint8_t)(i * 7 + 3);
    assert_int_equal(weight_store_open(f->m.socket, "acme", NULL, &s, err, sizeof err), 0);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_THREADS, 2), 0);
    /* one object of "big" alone, another of "small" */
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, BIG_BYTES), 0);
    weight_identity_set(&id, NULL, "llm", "viewed", "v1", 1);
    weight_policy pol = {WEIGHT_RES_HOT, 0.0, WEIGHT_MODE_MANUAL};
    CHECK(s, weight_put_begin(s, &id, &pol, &w));
    CHECK(s, weight_writer_add_tensor(w, "big", "BF16", 2, shape, src));
    CHECK(s, weight_writer_add_tensor(w, "small", "BF16", 1, small_shape, small));
    CHECK(s, weight_writer_commit(w, NULL));

    CHECK(s, weight_get_mapped(s, &id, &v));
    size_t big = view_index(v, "big"), tiny = view_index(v, "small");
    assert_int_equal(weight_mapped_verify(v, &big, 1), WEIGHT_OK);
    assert_int_equal(weight_mapped_data(v, big, &data), WEIGHT_OK);
    assert_non_null(data);
    assert_memory_equal(data, src, BIG_BYTES);
    assert_int_equal(weight_mapped_data(v, tiny, &data), WEIGHT_OK);
    assert_non_null(data);
    assert_memory_equal(data, small, sizeof small);
    weight_mapped_release(v);

    CHECK(s, weight_get_mapped(s, &id, &v));
    size_t out_of_range[2] = {big, weight_mapped_count(v)};
    assert_int_equal(weight_mapped_verify(v, out_of_range, 2), WEIGHT_EINVALID_ARGUMENT);
    assert_int_equal(weight_mapped_verify(NULL, NULL, 0), WEIGHT_EINVALID_ARGUMENT);

    segment_file(f, path, sizeof path);
    uint64_t at = (35ull << 20) + 4321;
    off_t off = flip_byte(path, src + at, 64);
    assert_int_equal(weight_mapped_verify(v, NULL, 0), WEIGHT_OK);
    assert_int_equal(weight_mapped_data(v, big, &data), WEIGHT_OK);
    assert_null(data);
    assert_int_equal(weight_mapped_data(v, tiny, &data), WEIGHT_OK);
    assert_non_null(data);
    assert_memory_equal(data, small, sizeof small);
    wait_dropped(f, s, &id);

    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, src + at, 1, off), 1);
    assert_int_equal(close(fd), 0);
    assert_int_equal(weight_mapped_verify(v, &big, 1), WEIGHT_OK);
    assert_int_equal(weight_mapped_data(v, big, &data), WEIGHT_OK);
    assert_null(data);
    assert_int_equal(weight_mapped_data(v, tiny, &data), WEIGHT_OK);
    assert_non_null(data);
    assert_memory_equal(data, small, sizeof small);
    weight_mapped_release(v);
    free(src);
    weight_store_close(s);
}

/* The sockets (Unix and TCP alike) and threads this process has now. */
static int count_fds_linking(const char *prefix)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char p[300], link[300];
        snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(p, link, sizeof link - 1);
        if (len <= 0) continue;
        link[len] = '\0';
        n += strncmp(link, prefix, strlen(prefix)) == 0;
    }
    closedir(d);
    return n;
}

static int count_threads(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Every lease of a store -- views held together, views taken and released
 * in turn, a weight_get -- is renewed by one connection and one thread of
 * the store (a serving loop that takes a view per request opened a
 * connection and started a thread for each), and a view outlives its
 * store: after weight_store_close its lease is still renewed (with a TTL
 * of 1 s, 1.5 s later the revision is still leased and cannot be removed)
 * and its bytes still read; its release ends the thread. (A TTL of 300 ms,
 * renewed every 100 ms, lapsed for 3 of 8 views once with the suite at -j4
 * beside two busy loops.) */
static void test_views_share_one_renewer_and_outlive_their_store(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m), *other = wx_open_store(&f->m);
    weight_mapped *v[8];
    weight_metadata md;
    const void *data;
    CHECK(s, weight_store_set_option(s, WEIGHT_OPT_LEASE_TTL_MS, 1000));
    wx_put_model(s, &f->id, f->t, N_T);
    int sockets = count_fds_linking("socket:"), threads = count_threads();

    CHECK(s, weight_get_mapped(s, &f->id, &v[0]));
    assert_int_equal(count_fds_linking("socket:"), sockets + 1);
    assert_int_equal(count_threads(), threads + 2);
    for (int i = 1; i < 8; i++) CHECK(s, weight_get_mapped(s, &f->id, &v[i]));
    for (int round = 0; round < 20; round++) {
        weight_mapped *w = NULL;
        CHECK(s, weight_get_mapped(s, &f->id, &w));
        weight_mapped_release(w);
    }
    CHECK(s, try_get(s, &f->id));
    assert_int_equal(count_fds_linking("socket:"), sockets + 1);
    assert_int_equal(count_threads(), threads + 2);
    usleep(1500 * 1000); /* > a TTL: renewed, not just taken */
    CHECK(other, weight_get_metadata(other, &f->id, &md, NULL));
    assert_int_equal(md.active_leases, 8);
    for (int i = 0; i < 8; i++) assert_int_equal(weight_mapped_status(v[i]), WEIGHT_OK);
    for (int i = 1; i < 8; i++) weight_mapped_release(v[i]);

    weight_store_close(s);
    usleep(1500 * 1000);
    assert_int_equal(weight_mapped_status(v[0]), WEIGHT_OK);
    CHECK(other, weight_get_metadata(other, &f->id, &md, NULL));
    assert_int_equal(md.active_leases, 1);
    assert_int_equal(weight_remove(other, &f->id, md.metadata_generation, NULL), WEIGHT_EBUSY);
    assert_int_equal(weight_mapped_data(v[0], 0, &data), WEIGHT_OK);
    assert_non_null(data);
    assert_memory_equal(data, f->t[0].data, sizeof f->t[0].data);
    weight_mapped_release(v[0]);
    assert_int_equal(count_threads(), threads);
    CHECK(other, weight_get_metadata(other, &f->id, &md, NULL));
    assert_int_equal(md.active_leases, 0);
    weight_store_close(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_repeated_get_walks_the_pages_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_segment_is_mapped_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grown_segment_is_mapped_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_object_larger_than_a_job_reads_in_parts, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_views_are_verified_ahead_of_use, setup, teardown),
        cmocka_unit_test_setup_teardown(test_views_share_one_renewer_and_outlive_their_store,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
