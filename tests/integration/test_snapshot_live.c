/* test_snapshot_live.c -- a real master keeps serving while a snapshot is
 * captured, and the snapshot is exactly the state when it was asked for.
 *
 * The master loads weight_mgmt.so and tests/plugins/recorder.so with
 * `save_hold_fifo`: the recorder's section save() blocks on a FIFO in the
 * test's directory until the test writes a byte into it. The test's open()
 * of the FIFO for writing returns once save() opened it for reading, so
 * from then on the capture is known to be in progress and held: no clock is
 * involved. Reads and writes on another connection are counted while it is
 * held (each answered, each durable); then the capture is let go and the
 * snapshot file is read back with snapshot.h: it holds what was applied when
 * the snapshot was asked for and nothing written during its capture, and a
 * restart after SIGKILL (snapshot + the log after it) serves both. A writer
 * that is killed, or whose save() fails, fails the snapshot closed: the RPC
 * says why, no snapshot file appears, nothing is truncated, the master
 * serves on and the next snapshot succeeds. So does a writer still running
 * at snapshot.write_timeout_s (its save() never let go): it is killed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
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
#include "rpc_client.h"
#include "snapshot.h"

#define RECORDER_PATH BUILD_DIR "/lib/testplugins/recorder.so"
#define RECORDER_SERVICE 40
#define RECORDER_SET_NEXT 1
#define START_MS 10000
#define KEYS_BEFORE 20
#define READS_DURING 200
#define PUTS_DURING 20

typedef struct live {
    hx_master m;
    char fifo[320];
} live;

/* A master with both plugins, the recorder's save() held on the FIFO and
 * no automatic snapshots (each snapshot here is asked for). */
static int setup_with(void **state, const char *snapshot_keys)
{
    live *t = calloc(1, sizeof(*t));
    char extra[1024];
    assert_non_null(t);
    assert_int_equal(hx_init(&t->m, "snaplive", NULL), 0);
    snprintf(t->fifo, sizeof(t->fifo), "%s/hold", t->m.dir);
    assert_int_equal(mkfifo(t->fifo, 0600), 0);
    snprintf(extra, sizeof(extra),
             "snapshot:\n  every_records: 0\n%s"
             "plugins:\n"
             "  - path: \"%s/lib/weight_mgmt.so\"\n"
             "  - path: \"%s\"\n    config:\n      save_hold_fifo: \"%s\"\n",
             snapshot_keys, BUILD_DIR, RECORDER_PATH, t->fifo);
    assert_int_equal(hx_reconfigure(&t->m, extra), 0);
    assert_int_equal(hx_start(&t->m, START_MS), 0);
    *state = t;
    return 0;
}

static int setup(void **state)
{
    return setup_with(state, "");
}

/* The same with a writer allowed WRITE_TIMEOUT_S seconds. */
#define WRITE_TIMEOUT_S 1
static int setup_short_deadline(void **state)
{
    return setup_with(state, "  write_timeout_s: 1\n");
}

static int teardown(void **state)
{
    live *t = *state;
    hx_cleanup(&t->m);
    free(t);
    return 0;
}

/* -- clients ------------------------------------------------------------------ */

static uint64_t put(kvc *c, const char *key)
{
    uint64_t seq = 0;
    if (kvc_put_bytes(c, key, key, strlen(key), SMP_DATA_KV, NULL, 0, &seq) != 0)
        fail_msg("put %s: %s", key, kvc_error(c));
    return seq;
}

static void assert_object(kvc *c, const char *key)
{
    unsigned char sha[32];
    kvc_object obj;
    hx_sha256(key, strlen(key), sha);
    if (kvc_get(c, key, &obj) != 0) fail_msg("%s: %s", key, kvc_error(c));
    assert_int_equal(obj.size, strlen(key));
    assert_memory_equal(obj.sha256, sha, 32);
}

/* Put prefix-00 .. prefix-(n-1), each holding its own name; the last one's
 * sequence. */
static uint64_t put_keys(kvc *c, const char *prefix, int n)
{
    char key[64];
    uint64_t last = 0;
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s-%02d", prefix, i);
        last = put(c, key);
    }
    return last;
}

static void assert_keys(kvc *c, const char *prefix, int n)
{
    char key[64];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s-%02d", prefix, i);
        assert_object(c, key);
    }
}

/* SIGKILL the master, start it again (snapshot + the log after it) and
 * connect. */
static kvc *restart_after_sigkill(live *t)
{
    hx_kill(&t->m);
    assert_int_equal(hx_start(&t->m, START_MS), 0);
    kvc *c = hx_client(&t->m);
    assert_non_null(c);
    return c;
}

static uint64_t recorder_set(const hx_master *m, const char *payload)
{
    char err[256];
    rpcc_conn *r = NULL;
    rpcc_options opt = {.timeout_ms = 10000};
    int st = -1;
    uint8_t *body = NULL;
    size_t len = 0;
    if (rpcc_connect(m->socket, &opt, &r, err, sizeof(err)) != 0) fail_msg("%s", err);
    assert_int_equal(rpcc_call(r, RECORDER_SERVICE, RECORDER_SET_NEXT, (const uint8_t *)payload,
                               strlen(payload), &st, &body, &len, NULL),
                     0);
    assert_int_equal(st, 0);
    assert_int_equal(len, 8);
    uint64_t seq = 0;
    for (int i = 7; i >= 0; i--) seq = (seq << 8) | body[i];
    free(body);
    rpcc_close(r);
    return seq;
}

/* One snapshot RPC on its own connection and thread: it is answered only
 * once the capture the test holds is let go. */
typedef struct snap_call {
    const hx_master *m;
    pthread_t thread;
    int rc;
    uint64_t seq;
    char error[512];
    _Atomic int answered;
} snap_call;

static void *snap_thread(void *arg)
{
    snap_call *s = arg;
    char err[256];
    kvc *c = NULL;
    s->rc = -1;
    if (kvc_connect(s->m->socket, 60000, &c, err, sizeof(err)) != 0) {
        snprintf(s->error, sizeof(s->error), "%s", err);
    } else {
        s->rc = kvc_snapshot(c, &s->seq);
        snprintf(s->error, sizeof(s->error), "%s", s->rc < 0 ? kvc_error(c) : "");
        kvc_close(c);
    }
    s->answered = 1;
    return NULL;
}

static void snap_begin(snap_call *s, const hx_master *m)
{
    memset(s, 0, sizeof(*s));
    s->m = m;
    assert_int_equal(pthread_create(&s->thread, NULL, snap_thread, s), 0);
}

static void snap_end(snap_call *s)
{
    assert_int_equal(pthread_join(s->thread, NULL), 0);
}

/* Open the FIFO for writing: returns once a save() holds it for reading. */
static int hold_open(const live *t)
{
    int fd = open(t->fifo, O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

/* Let the held save() go on ('G') or fail ('F'). */
static void hold_release(int fd, char byte)
{
    assert_int_equal(write(fd, &byte, 1), 1);
    close(fd);
}

/* -- files -------------------------------------------------------------------- */

static int snapshot_exists(const hx_master *m, uint64_t seq)
{
    char path[600];
    struct stat st;
    snprintf(path, sizeof(path), "%s/data/snapshots/snapshot-%020llu.snap", m->dir,
             (unsigned long long)seq);
    return stat(path, &st) == 0;
}

static int contains(const uint8_t *hay, size_t n, const char *needle)
{
    return memmem(hay, n, needle, strlen(needle)) != NULL;
}

/* The child the master forked to write its snapshot (the one child whose
 * parent is the master), or -1. */
static pid_t snapshot_child(pid_t master)
{
    pid_t found = -1;
    DIR *d = opendir("/proc");
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[300], buf[512];
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *close_paren = strrchr(buf, ')');
        int ppid = 0;
        char st = 0;
        if (close_paren != NULL && sscanf(close_paren + 1, " %c %d", &st, &ppid) == 2 &&
            ppid == master)
            found = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    return found;
}

/* How many of pid's descriptors are sockets or anonymous inodes (epoll,
 * eventfd, timerfd): the master's connections and its loop's machinery. */
static int shared_descriptors(pid_t pid)
{
    char dir[64], path[400], target[256];
    int n = 0;
    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        ssize_t k = readlink(path, target, sizeof(target) - 1);
        if (k <= 0) continue;
        target[k] = '\0';
        if (strncmp(target, "socket:", 7) == 0 || strncmp(target, "anon_inode:", 11) == 0) n++;
    }
    closedir(d);
    return n;
}

/* -- tests ------------------------------------------------------------------ */

/* While the capture is held in the recorder's save(), the writer holds no
 * socket of the master's, 200 reads and 20 durable puts on another
 * connection are all answered and the snapshot RPC is not; let go, the snapshot is at the sequence applied when it was asked
 * for: it holds the keys and the recorder entry written before and none
 * written during its capture, and after a SIGKILL the restart serves them
 * all (snapshot plus the log after it, which was not truncated past it). */
static void test_reads_and_writes_answered_while_a_snapshot_is_captured(void **state)
{
    live *t = *state;
    char key[64];
    kvc *c = hx_client(&t->m);
    assert_non_null(c);
    uint64_t last = put_keys(c, "before", KEYS_BEFORE);
    uint64_t rec_a = recorder_set(&t->m, "A");
    assert_true(rec_a > last);

    snap_call s;
    snap_begin(&s, &t->m);
    int hold = hold_open(t);
    /* The writer keeps none of the master's sockets or loop descriptors: a
     * connection the master closes meanwhile is closed for its peer. */
    pid_t writer = snapshot_child(t->m.pid);
    assert_true(writer > 0);
    assert_true(shared_descriptors(t->m.pid) > 0);
    assert_int_equal(shared_descriptors(writer), 0);

    int answered = 0;
    for (int i = 0; i < READS_DURING / KEYS_BEFORE; i++) {
        assert_keys(c, "before", KEYS_BEFORE);
        answered += KEYS_BEFORE;
    }
    for (int i = 0; i < PUTS_DURING; i++) {
        snprintf(key, sizeof(key), "during-%02d", i);
        assert_true(put(c, key) > rec_a);
        answered++;
    }
    uint64_t rec_b = recorder_set(&t->m, "B");
    answered++;
    assert_int_equal(answered, READS_DURING + PUTS_DURING + 1);
    assert_int_equal(s.answered, 0); /* the capture is still held */

    hold_release(hold, 'G');
    snap_end(&s);
    if (s.rc != 0) fail_msg("snapshot: %s", s.error);
    assert_int_equal(s.seq, rec_a);
    assert_true(rec_b > s.seq);

    /* The file is the state at rec_a. */
    char path[600], err[512];
    snap_image *img = NULL;
    snprintf(path, sizeof(path), "%s/data/snapshots/snapshot-%020llu.snap", t->m.dir,
             (unsigned long long)rec_a);
    if (snap_load_file(path, &img, err, sizeof(err)) != 0) fail_msg("%s", err);
    assert_int_equal(snap_image_last_seq(img), rec_a);
    const snap_section *objs = snap_image_section(img, "host_objects");
    assert_non_null(objs);
    for (int i = 0; i < KEYS_BEFORE; i++) {
        snprintf(key, sizeof(key), "before-%02d", i);
        assert_true(contains(objs->data, objs->len, key));
    }
    assert_false(contains(objs->data, objs->len, "during-"));
    const snap_section *rec = snap_image_section(img, "recorder");
    assert_non_null(rec);
    assert_int_equal(rec->len, 5); /* u32 length 1, "A" */
    assert_memory_equal(rec->data, "\1\0\0\0A", 5);
    snap_image_free(img);
    kvc_close(c);

    c = restart_after_sigkill(t);
    assert_keys(c, "before", KEYS_BEFORE);
    assert_keys(c, "during", PUTS_DURING);
    kvc_close(c);
}

/* After failed snapshots: put key, and the next snapshot (its save() let
 * go at once) is written at key's sequence; a restart after SIGKILL serves
 * the keys put before the failures and key (nothing was truncated). Closes
 * c. */
static void next_snapshot_and_restart(live *t, kvc *c, const char *key)
{
    snap_call s;
    uint64_t more = put(c, key);
    snap_begin(&s, &t->m);
    hold_release(hold_open(t), 'G');
    snap_end(&s);
    if (s.rc != 0) fail_msg("snapshot: %s", s.error);
    assert_int_equal(s.seq, more);
    assert_true(snapshot_exists(&t->m, more));
    kvc_close(c);

    c = restart_after_sigkill(t);
    assert_keys(c, "before", KEYS_BEFORE);
    assert_object(c, key);
    kvc_close(c);
}

/* The writer killed while it captures, then a save() that fails: each
 * snapshot RPC answers an error naming the cause, no snapshot file appears
 * and the master serves on; the next snapshot is written, and a restart
 * after SIGKILL serves every key (nothing was truncated by the failures). */
static void test_a_snapshot_writer_that_dies_fails_closed(void **state)
{
    live *t = *state;
    kvc *c = hx_client(&t->m);
    assert_non_null(c);
    uint64_t last = put_keys(c, "before", KEYS_BEFORE);

    /* Killed while it holds the state. */
    snap_call s;
    snap_begin(&s, &t->m);
    int hold = hold_open(t);
    pid_t child = snapshot_child(t->m.pid);
    assert_true(child > 0);
    assert_int_equal(kill(child, SIGKILL), 0);
    snap_end(&s);
    close(hold);
    assert_true(s.rc < 0);
    assert_true(hx_says(s.error, "ended without a report: it was killed by signal 9"));
    assert_false(snapshot_exists(&t->m, last));
    assert_true(hx_alive(&t->m));
    assert_object(c, "before-00");

    /* A section that fails to save. */
    snap_begin(&s, &t->m);
    hold_release(hold_open(t), 'F');
    snap_end(&s);
    assert_true(s.rc < 0);
    assert_true(hx_says(s.error, "SMP_EIO"));
    assert_false(snapshot_exists(&t->m, last));
    assert_true(hx_log_contains(&t->m, "section 'recorder' of recorder failed to save"));

    next_snapshot_and_restart(t, c, "after-failures");
}

/* How many lines of the master's log hold needle. */
static int log_lines(const hx_master *m, const char *needle)
{
    char line[2048];
    int n = 0;
    FILE *fp = fopen(m->log, "r");
    while (fp != NULL && fgets(line, sizeof(line), fp) != NULL) n += strstr(line, needle) != NULL;
    if (fp != NULL) fclose(fp);
    return n;
}

/* One snapshot whose save() fails ('F'): the RPC names the cause. */
static void failed_snapshot(live *t)
{
    snap_call s;
    snap_begin(&s, &t->m);
    hold_release(hold_open(t), 'F');
    snap_end(&s);
    assert_true(s.rc < 0);
    if (!hx_says(s.error, "its writer failed: SMP_EIO")) fail_msg("snapshot error: %s", s.error);
}

/* Snapshots failing again and again (a full disk fails the automatic retry
 * every 5 s) do not flood the log: the first three are logged, the third
 * saying that more are counted; the others are not, though each RPC still
 * names its cause; the snapshot written next says how many went unlogged,
 * and a failure after it is logged at once. */
static void test_failed_snapshots_are_logged_a_few_a_window(void **state)
{
    live *t = *state;
    kvc *c = hx_client(&t->m);
    assert_non_null(c);
    put_keys(c, "before", KEYS_BEFORE);
    for (int i = 0; i < 6; i++) failed_snapshot(t);
    assert_int_equal(log_lines(&t->m, "its writer failed: SMP_EIO"), 3);
    assert_int_equal(log_lines(&t->m, "more failures are counted, logged once every 10 minutes"), 1);

    snap_call s;
    uint64_t seq = put(c, "after-failures");
    snap_begin(&s, &t->m);
    hold_release(hold_open(t), 'G');
    snap_end(&s);
    if (s.rc != 0) fail_msg("snapshot: %s", s.error);
    char want[160];
    snprintf(want, sizeof(want), "snapshot at %llu written; 3 failed snapshots before it were not logged",
             (unsigned long long)seq);
    assert_int_equal(log_lines(&t->m, want), 1);

    put(c, "after-success");
    failed_snapshot(t);
    assert_int_equal(log_lines(&t->m, "its writer failed: SMP_EIO"), 4);
    kvc_close(c);
}

/* A writer that never finishes (its save() held for good) is killed at
 * snapshot.write_timeout_s: the RPC names the deadline, the child is gone,
 * no file appears and nothing is truncated; the next snapshot is written
 * and a restart after SIGKILL serves every key. */
static void test_a_snapshot_writer_past_its_deadline_is_killed(void **state)
{
    live *t = *state;
    kvc *c = hx_client(&t->m);
    assert_non_null(c);
    uint64_t last = put_keys(c, "before", KEYS_BEFORE);

    snap_call s;
    snap_begin(&s, &t->m);
    int hold = hold_open(t); /* never released: the save() waits for good */
    pid_t child = snapshot_child(t->m.pid);
    assert_true(child > 0);
    snap_end(&s);
    assert_true(s.rc < 0);
    char why[160];
    snprintf(why, sizeof(why), "had not finished after snapshot.write_timeout_s (%d s) and was killed",
             WRITE_TIMEOUT_S);
    if (!hx_says(s.error, why)) fail_msg("snapshot error: %s", s.error);
    assert_true(hx_log_contains(&t->m, why));
    assert_int_equal(snapshot_child(t->m.pid), -1); /* killed and reaped */
    assert_true(kill(child, 0) < 0);
    close(hold);
    assert_false(snapshot_exists(&t->m, last));
    assert_true(hx_alive(&t->m));
    assert_object(c, "before-00");

    next_snapshot_and_restart(t, c, "after-deadline");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reads_and_writes_answered_while_a_snapshot_is_captured,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_snapshot_writer_that_dies_fails_closed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failed_snapshots_are_logged_a_few_a_window, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_snapshot_writer_past_its_deadline_is_killed,
                                        setup_short_deadline, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
