/* test_oplog_full.c -- a master whose OpLog's filesystem fills up: the
 * OpLog turns read-only (deliberately, until a restart), and `weightctl
 * status` says so -- in its text and its --json, exiting 1 -- where it
 * showed nothing wrong before.
 *
 * The master's data_dir/oplog is a small tmpfs the test mounts (it needs
 * root, which CI has; without it the test is skipped, saying why), filled
 * by a file of the test's until puts can no longer be made durable: a real
 * ENOSPC, no fault injected. The mount is detached in the teardown, after
 * the master is stopped, whatever happened. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "weight_model.h"

#define OUT_CAP (1 << 16)

typedef struct fx {
    hx_master m;
    char oplog_dir[400];
    int mounted;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    char data[300];
    assert_non_null(f);
    assert_int_equal(hx_init(&f->m, "oplogfull",
                             "oplog:\n  segment_bytes: 16384\n  preallocate: false\n"),
                     0);
    snprintf(data, sizeof(data), "%s/data", f->m.dir);
    snprintf(f->oplog_dir, sizeof(f->oplog_dir), "%s/oplog", data);
    assert_int_equal(mkdir(data, 0700), 0);
    assert_int_equal(mkdir(f->oplog_dir, 0700), 0);
    if (mount("tmpfs", f->oplog_dir, "tmpfs", 0, "size=256k,mode=0700") == 0) f->mounted = 1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    if (f->m.pid > 0) hx_stop(&f->m);
    if (f->mounted) umount2(f->oplog_dir, MNT_DETACH);
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

/* Fill dir's filesystem with a file of zeros until a write finds no room. */
static void fill_up(const char *dir)
{
    char path[500], block[4096] = {0};
    snprintf(path, sizeof(path), "%s/filler", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    while (write(fd, block, sizeof(block)) == (ssize_t)sizeof(block)) {
    }
    assert_int_equal(errno, ENOSPC);
    close(fd);
}

/* The OpLog's disk full: puts fail DURABILITY_FAILED from then on, and
 * status shows the OpLog failed -- the sequence of the first record lost,
 * the OS's cause, what to do -- in text and JSON, exiting 1; before, it
 * showed the OpLog "ok" and exited 0. */
static void test_status_shows_an_oplog_turned_read_only(void **state)
{
    fx *f = *state;
    char *out = malloc(OUT_CAP);
    assert_non_null(out);
    if (!f->mounted) {
        fprintf(stderr, "test_oplog_full: cannot mount a tmpfs (%s): skipped (needs root)\n",
                strerror(errno));
        free(out);
        skip();
    }
    assert_int_equal(hx_start(&f->m, 20000), 0);
    kvc *c = hx_client(&f->m);
    assert_non_null(c);
    assert_int_equal(kvc_put_bytes(c, "before", "x", 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(wx_weightctl(&f->m, out, OUT_CAP, "--json status"), 0);
    if (!hx_says(out, "\"oplog\":{\"state\":\"ok\"}")) fail_msg("status: %s", out);
    assert_int_equal(wx_weightctl(&f->m, out, OUT_CAP, "status"), 0);
    assert_false(hx_says(out, "FAILED"));

    fill_up(f->oplog_dir);
    int rc = 0;
    char key[32];
    for (int i = 0; i < 4096 && rc == 0; i++) {
        snprintf(key, sizeof(key), "k%04d", i);
        rc = kvc_put_bytes(c, key, "y", 1, SMP_DATA_KV, NULL, 0, NULL);
    }
    assert_int_equal(rc, SMP_EDURABILITY);
    assert_true(hx_log_contains(&f->m, "the log is read-only now"));

    assert_int_equal(wx_weightctl(&f->m, out, OUT_CAP, "status"), 1);
    if (!hx_says(out, "oplog     FAILED (read-only since seq ") ||
        !hx_says(out, "No space left on device") ||
        !hx_says(out, "restart the master once the cause is fixed"))
        fail_msg("status: %s", out);
    assert_int_equal(wx_weightctl(&f->m, out, OUT_CAP, "--json status"), 1);
    if (!hx_says(out, "\"oplog\":{\"state\":\"failed\",\"failed_seq\":") ||
        !hx_says(out, "No space left on device"))
        fail_msg("status --json: %s", out);
    /* the sequence status names is one no record holds: past every
       durable one */
    const char *at = strstr(out, "\"failed_seq\":");
    unsigned long long seq = strtoull(at + strlen("\"failed_seq\":"), NULL, 10);
    assert_true(seq > 1);
    /* still read-only (deliberately, until a restart) */
    assert_int_equal(kvc_put_bytes(c, "after", "z", 1, SMP_DATA_KV, NULL, 0, NULL), SMP_EDURABILITY);
    kvc_close(c);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_status_shows_an_oplog_turned_read_only, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
