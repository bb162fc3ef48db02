/* test_weight_repair.c -- revisions through the loss of memory, on a real
 * master with the real weight_mgmt.so and its embedded node.
 *
 * Revisions are published and read with libweightclient; the loss of
 * memory is what a reboot does to /dev/shm: the master (and its node) stop,
 * the node's segment file is deleted, and they start again on the same
 * data_dir and cold directory. Pinned here: a COLD revision is READY again
 * and reads back exactly (SHA-256 of every tensor) -- its manifest had its
 * verified cold copy; a HOT revision whose payloads kept cold copies is
 * repaired by a REPAIRING operation the tick starts by itself (READY + HOT,
 * counted on /metrics); a HOT revision with nothing on disk is DEGRADED,
 * not READY; `weightctl repair` starts a repair explicitly and refuses a
 * stale --expect. */
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
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "weight_check.h"
#include "weight_model.h"
#include "weightclient.h"

#define WAIT_MS 30000 /* generous: the machine is shared */

/* -- a small model --------------------------------------------------------------- */

static wx_tensor model[] = {
    {"embed.weight", {32, 32}, {0}},
    {"layers.0.w", {16, 64}, {0}},
    {"layers.1.w", {64, 16}, {0}},
};
#define N_MODEL (sizeof(model) / sizeof(model[0]))

/* -- the master -------------------------------------------------------------------- */

typedef struct fixture {
    hx_master m;
} fixture;

/* The tests' config, then extra (YAML, "" for none). 0 or -1. */
static int configure(fixture *f, const char *extra)
{
    char cfg[1400];
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: 33554432\n"
             "  cold_dir: \"%s/cold\"\n  poll_ms: 10\n"
             "cluster:\n  default_weight_preferred_residency: hot\n"
             "  weight_migration_cooldown_ms: 100\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n%s",
             f->m.dir, f->m.dir, BUILD_DIR, extra);
    return hx_reconfigure(&f->m, cfg);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    wx_model_fill(model, N_MODEL, 131);
    if (f == NULL || hx_init(&f->m, "repair", NULL) < 0) return -1;
    if (configure(f, "") < 0 || hx_start(&f->m, 20000) < 0) return -1;
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

static void sleep_ms(long ms)
{
    usleep((useconds_t)ms * 1000);
}

/* Stop the master and its embedded node, delete the segment files (what a
 * reboot does to /dev/shm), start again on the same data and cold files. */
static void reboot_without_memory(fixture *f)
{
    char dir[400], path[700];
    assert_int_equal(hx_stop(&f->m), 0);
    snprintf(dir, sizeof(dir), "%s/shm", f->m.dir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int removed = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        assert_int_equal(unlink(path), 0);
        removed++;
    }
    closedir(d);
    assert_true(removed > 0);
    assert_int_equal(hx_start(&f->m, 20000), 0);
}

/* -- tests --------------------------------------------------------------------- */

/* COLD survives the loss of memory, and HOT revisions with cold replicas
 * are repaired: after a reboot without the segment, the COLD revision is
 * READY and reads back exactly; the HOT one that once was COLD is brought
 * back to READY + HOT by a REPAIRING operation nobody asked for, and reads
 * back exactly; the HOT one that never had a cold payload is DEGRADED (its
 * payloads are gone) and not readable. */
static void test_cold_survives_the_loss_of_memory(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity cold, back, hot;
    assert_int_equal(weight_identity_set(&cold, NULL, "llm", "cold", "v1", 1), 0);
    assert_int_equal(weight_identity_set(&back, NULL, "llm", "back", "v1", 1), 0);
    assert_int_equal(weight_identity_set(&hot, NULL, "llm", "hot", "v1", 1), 0);
    wx_put_model(s, &cold, model, N_MODEL);
    wx_put_model(s, &back, model, N_MODEL);
    wx_put_model(s, &hot, model, N_MODEL);
    wx_migrate_and_wait(s, &cold, WEIGHT_RES_COLD);
    wx_migrate_and_wait(s, &back, WEIGHT_RES_COLD);
    wx_migrate_and_wait(s, &back, WEIGHT_RES_HOT);
    wx_get_and_compare(s, &cold, model, N_MODEL);
    wx_get_and_compare(s, &back, model, N_MODEL);
    /* Every manifest has its cold copy (the hot one's too, from the tick). */
    for (int i = 0; wx_metric(&f->m, "weight_manifest_replica_tasks_total{task=\"cold_copy\"}") < 3; i++) {
        if (i * 20 > WAIT_MS) fail_msg("the manifests got no cold copies");
        sleep_ms(20);
    }
    weight_store_close(s);

    reboot_without_memory(f);
    s = wx_open_store(&f->m);
    /* The hot revision without cold payloads shows the loss was seen. */
    wx_wait_state(s, &hot, WEIGHT_DEGRADED, WEIGHT_RES_ABSENT); /* nothing of it is readable */
    for (int i = 0; wx_metric(&f->m, "weight_repairs_total{result=\"succeeded\"}") < 1; i++) {
        if (i * 20 > WAIT_MS) fail_msg("no repair succeeded");
        sleep_ms(20);
    }
    assert_true(wx_metric(&f->m, "weight_repairs_total{result=\"started\"}") >= 1);
    weight_metadata md = wx_wait_state(s, &cold, WEIGHT_READY, WEIGHT_RES_COLD);
    assert_int_equal(wx_get_and_compare(s, &cold, model, N_MODEL), 0); /* from the cold files */
    md = wx_wait_state(s, &back, WEIGHT_READY, WEIGHT_RES_HOT);
    assert_true(md.observed_hot_ratio == 1.0);
    assert_int_equal(wx_get_and_compare(s, &back, model, N_MODEL), 3 * 4096); /* memory again */
    int exists = 1;
    CHECK(s, weight_is_exist(s, &hot, &exists));
    assert_int_equal(exists, 0);
    weight_store_close(s);
}

/* weightctl repair starts a REPAIRING operation on a READY revision at the
 * generation it read (printed), or at --expect N; a stale --expect is
 * refused with STALE_GENERATION and changes nothing. */
static void test_weightctl_repair(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity id;
    char out[4096];
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "cli", "v1", 1), 0);
    wx_put_model(s, &id, model, N_MODEL);
    weight_metadata md = wx_wait_state(s, &id, WEIGHT_READY, WEIGHT_RES_HOT);
    char arg[256];
    snprintf(arg, sizeof(arg), "--tenant acme repair llm/cli/v1@1 --expect %llu",
             (unsigned long long)(md.metadata_generation + 5));
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), arg), 1);
    if (strstr(out, "STALE_GENERATION") == NULL) fail_msg("weightctl repair said: %s", out);
    weight_metadata same;
    CHECK(s, weight_get_metadata(s, &id, &same, NULL));
    assert_int_equal(same.metadata_generation, md.metadata_generation);

    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "--tenant acme repair llm/cli/v1@1"), 0);
    char used[64];
    snprintf(used, sizeof(used), "generation %llu", (unsigned long long)md.metadata_generation);
    if (strstr(out, used) == NULL || strstr(out, "REPAIRING") == NULL)
        fail_msg("weightctl repair said: %s", out);
    md = wx_wait_state(s, &id, WEIGHT_READY, WEIGHT_RES_HOT);
    assert_int_equal(md.metadata_generation, same.metadata_generation + 2);
    wx_get_and_compare(s, &id, model, N_MODEL);
    weight_store_close(s);
}

/* A client that mapped the segment before a reboot does not write into the
 * old file afterwards: the store that published A before the segment was
 * deleted publishes B after the restart, and B reads back exactly through
 * a fresh store (before, B's bytes went into the old, deleted file the
 * cached mapping still held, and the new segment served zeros). */
static void test_a_new_segment_file_is_mapped_again(void **state)
{
    fixture *f = *state;
    weight_identity a, b;
    weight_store *s = wx_open_store(&f->m);
    weight_identity_set(&a, NULL, "ns", "before", "r1", 1);
    weight_identity_set(&b, NULL, "ns", "after", "r1", 1);
    wx_put_model(s, &a, model, N_MODEL);
    reboot_without_memory(f);
    for (int i = 0; i * 20 < WAIT_MS; i++) { /* the first call may meet the old connection */
        weight_writer *w = NULL;
        weight_policy pol = {WEIGHT_RES_HOT, 0.0, WEIGHT_MODE_MANUAL};
        if (weight_put_begin(s, &b, &pol, &w) == WEIGHT_OK) {
            weight_writer_abort(w);
            break;
        }
        sleep_ms(20);
    }
    wx_put_model(s, &b, model, N_MODEL);
    weight_store_close(s);
    weight_store *fresh = wx_open_store(&f->m);
    wx_wait_state(fresh, &b, WEIGHT_READY, WEIGHT_RES_HOT);
    wx_get_and_compare(fresh, &b, model, N_MODEL);
    weight_store_close(fresh);
}

/* The .cold files of the cold directory of size bytes (-1: any; bare
 * names, at most max into names, each of cap bytes); how many there are. */
static size_t cold_files_of_size(fixture *f, long size, char names[][128], size_t max)
{
    char dir[400], path[700];
    size_t n = 0;
    snprintf(dir, sizeof(dir), "%s/cold", f->m.dir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len < 5 || len >= 128 || strcmp(e->d_name + len - 5, ".cold") != 0) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        fseek(fp, 0, SEEK_END);
        long got = ftell(fp);
        fclose(fp);
        if (size >= 0 && got != size) continue;
        if (n < max) snprintf(names[n], 128, "%s", e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

/* Overwrite 4 bytes of the header of the cold file at path (its key). */
static void overwrite_header(const char *path)
{
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 100, SEEK_SET), 0);
    assert_int_equal(fwrite("XXXX", 1, 4, fp), 4);
    assert_int_equal(fclose(fp), 0);
}

/* Flip the bits of mask in the byte at `at` of the file at path (a cold
 * file, or a memory replica's place in its segment file). */
static void flip_byte(const char *path, uint64_t at, unsigned char mask)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b = 0;
    assert_int_equal(pread(fd, &b, 1, (off_t)at), 1);
    b ^= mask;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)at), 1);
    close(fd);
}

/* Flip a byte of the data of the cold file at path (past its header, which
 * stays intact): rot only a hash of the data finds. */
static void rot_data(const char *path)
{
    flip_byte(path, 4096 + 1000, 0xff);
}

/* Publish id as COLD; the name of one of its payload files into name
 * (payload files: the header, then one 4 KiB payload). */
static void put_cold_and_pick_a_payload_file(fixture *f, weight_store *s, const weight_identity *id,
                                             char name[128])
{
    char before[16][128], after[16][128];
    const long payload_file = 4096 + 4096;
    size_t nb = cold_files_of_size(f, payload_file, before, 16);
    wx_put_model(s, id, model, N_MODEL);
    wx_migrate_and_wait(s, id, WEIGHT_RES_COLD);
    size_t na = cold_files_of_size(f, payload_file, after, 16);
    assert_int_equal(na, nb + N_MODEL);
    for (size_t i = 0; i < na; i++) {
        int old = 0;
        for (size_t k = 0; k < nb; k++) old |= strcmp(after[i], before[k]) == 0;
        if (!old) {
            memcpy(name, after[i], 128);
            return;
        }
    }
    fail_msg("no new payload file");
}

/* The revision id is removed (it is DEGRADED: a payload has nothing to be
 * restored from) and `weightctl fsck` is clean again. */
static void remove_and_check_clean(fixture *f, weight_store *s, const weight_identity *id)
{
    char out[8192];
    weight_metadata md;
    CHECK(s, weight_get_metadata(s, id, &md, NULL));
    CHECK(s, weight_remove(s, id, md.metadata_generation, NULL));
    wx_wait_state(s, id, WEIGHT_DELETED, WEIGHT_RES_ABSENT);
    if (wx_weightctl(&f->m, out, sizeof(out), "fsck") != 0 || strstr(out, "clean\n") == NULL)
        fail_msg("fsck after the removal said: %s", out);
}

/* `weightctl fsck ARGS` reports the cold file name (at path) as a corrupt
 * replica of a payload of revision rev ("llm/rot/v1") and exits 1, read-only:
 * the revision stays READY, the file stays. `fsck ARGS --repair` drops the
 * replica: the revision turns DEGRADED (nothing else to read that payload
 * from), the file is deleted, and fsck -- that one and the next -- reports
 * the payload as an object with no replica left (exit 1: the store is not
 * whole) until the revision is removed; then fsck is clean. */
static void assert_fsck_drops_the_replica(fixture *f, weight_store *s, const weight_identity *id,
                                          const char *rev, const char *name, const char *path,
                                          const char *args)
{
    char cmd[64], out[8192], want[400];
    snprintf(cmd, sizeof(cmd), "fsck %s", args);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), cmd), 1);
    snprintf(want, sizeof(want), "corrupt cold file %s: replica of weights/acme/%s/1/payload/", name,
             rev);
    if (strstr(out, want) == NULL || strstr(out, "0 orphans, 1 corrupt replicas") == NULL)
        fail_msg("%s said: %s", cmd, out);
    /* the corrupt file's bytes still count on disk, as its replica's do */
    unsigned long long disk = 0, reps = 1;
    const char *line = strstr(out, "cold bytes on disk ");
    if (line == NULL || sscanf(line, "cold bytes on disk %llu, cold replica bytes %llu", &disk, &reps) != 2 ||
        disk != reps)
        fail_msg("%s: the bytes on disk and the replicas' disagree: %s", cmd, out);
    weight_metadata md;
    CHECK(s, weight_get_metadata(s, id, &md, NULL));
    assert_int_equal((int)md.availability, WEIGHT_READY); /* read-only */
    assert_int_equal(access(path, F_OK), 0);

    snprintf(cmd, sizeof(cmd), "fsck %s --repair", args);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), cmd), 1);
    snprintf(want, sizeof(want), "  no replica: weights/acme/%s/1/payload/", rev);
    if (strstr(out, "1 corrupt replicas dropped") == NULL ||
        strstr(out, "1 objects have no replica left") == NULL || strstr(out, want) == NULL)
        fail_msg("%s said: %s", cmd, out);
    wx_wait_state(s, id, WEIGHT_DEGRADED, -1);
    for (int i = 0; access(path, F_OK) == 0; i++) {
        if (i * 20 > WAIT_MS) fail_msg("%s was not deleted", name);
        sleep_ms(20);
    }
    snprintf(cmd, sizeof(cmd), "fsck %s --json", args);
    snprintf(want, sizeof(want),
             "\"corrupt_replicas\":0,\"objects_without_replica\":1,"
             "\"objects_without_replica_keys\":[\"weights/acme/%s/1/payload/", rev);
    if (wx_weightctl(&f->m, out, sizeof(out), cmd) != 1 || strstr(out, want) == NULL)
        fail_msg("%s said: %s", cmd, out);
    remove_and_check_clean(f, s, id);
}

/* weightctl fsck reports a cold file whose header is bad but which a
 * replica names, and --repair drops the replica (assert_fsck_drops_the_replica).
 * Before, fsck counted such a file and said "clean". */
static void test_fsck_reports_and_drops_a_corrupt_replica(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity id;
    char name[128], path[700];
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "rot", "v1", 1), 0);
    put_cold_and_pick_a_payload_file(f, s, &id, name);
    snprintf(path, sizeof(path), "%s/cold/%s", f->m.dir, name);
    overwrite_header(path);
    assert_fsck_drops_the_replica(f, s, &id, "llm/rot/v1", name, path, "");
    weight_store_close(s);
}

/* A cold file whose data rotted (one byte of the payload flipped, the
 * header intact) passes the plain fsck, which reads headers only; fsck
 * --deep reads the data, reports the file as a corrupt replica, and
 * --deep --repair drops it (assert_fsck_drops_the_replica). */
static void test_fsck_deep_finds_data_that_rotted(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity id;
    char name[128], path[700], out[8192];
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "rot", "v2", 1), 0);
    put_cold_and_pick_a_payload_file(f, s, &id, name);
    snprintf(path, sizeof(path), "%s/cold/%s", f->m.dir, name);
    rot_data(path);

    if (wx_weightctl(&f->m, out, sizeof(out), "fsck") != 0) fail_msg("plain fsck said: %s", out);
    assert_fsck_drops_the_replica(f, s, &id, "llm/rot/v2", name, path, "--deep");
    weight_store_close(s);
}

/* A cold file that a client's read finds corrupt (its header overwritten
 * while the master runs) is reported by the node and its replica dropped:
 * the COLD revision it belonged to becomes DEGRADED, weight_is_exist says
 * no, another COLD revision stays READY and readable, and the file, no
 * replica's now, is deleted (fsck finds nothing). Before, the revision
 * stayed READY and is_exist said yes until a restart. */
static void test_a_cold_file_a_read_finds_corrupt_is_dropped(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity bad, good;
    char name[128], path[700], out[8192];
    assert_int_equal(weight_identity_set(&good, NULL, "llm", "good", "v1", 1), 0);
    assert_int_equal(weight_identity_set(&bad, NULL, "llm", "bad", "v1", 1), 0);
    put_cold_and_pick_a_payload_file(f, s, &good, name);
    put_cold_and_pick_a_payload_file(f, s, &bad, name); /* a payload file of bad's */

    snprintf(path, sizeof(path), "%s/cold/%s", f->m.dir, name);
    overwrite_header(path);

    /* Every payload is read: the corrupt one fails the get. */
    weight_metadata md;
    CHECK(s, weight_get_metadata(s, &bad, &md, NULL));
    assert_int_equal((int)md.availability, WEIGHT_READY);
    char arg[900];
    snprintf(arg, sizeof(arg), "--tenant acme get llm/bad/v1@1 --out %s/out", f->m.dir);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), arg), 1);
    if (strstr(out, "corrupted cold file") == NULL) fail_msg("weightctl get said: %s", out);
    md = wx_wait_state(s, &bad, WEIGHT_DEGRADED, -1);
    int exists = 1;
    CHECK(s, weight_is_exist(s, &bad, &exists));
    assert_int_equal(exists, 0);
    if (!hx_log_contains(&f->m, "found corrupt or missing by a read (the node's log says which): "
                                "its replica is dropped")) {
        hx_print_log(&f->m);
        fail_msg("the master did not say it dropped the replica of %s", name);
    }

    wx_wait_state(s, &good, WEIGHT_READY, WEIGHT_RES_COLD);
    CHECK(s, weight_is_exist(s, &good, &exists));
    assert_int_equal(exists, 1);
    wx_get_and_compare(s, &good, model, N_MODEL);

    /* The file no replica names any more is deleted, as any such file is;
       fsck finds no file to judge, and names the payload left with no
       replica until the revision is removed. */
    for (int i = 0; access(path, F_OK) == 0; i++) {
        if (i * 20 > WAIT_MS) fail_msg("%s was not deleted", name);
        sleep_ms(20);
    }
    if (wx_weightctl(&f->m, out, sizeof(out), "fsck") != 1 ||
        strstr(out, "0 orphaned") == NULL || strstr(out, "1 objects have no replica left") == NULL ||
        strstr(out, "  no replica: weights/acme/llm/bad/v1/1/payload/") == NULL)
        fail_msg("fsck said: %s", out);
    remove_and_check_clean(f, s, &bad);
    weight_store_close(s);
}

/* weightctl ARGS fails (exit 1) on the rotted cold file name, at path, of
 * revision id: it says the bytes did not verify and what the node said when
 * asked to hash the file (corrupt, reported); the revision then turns
 * DEGRADED as the master drops the replica, and the file is deleted. */
static void assert_reader_reports_rot(fixture *f, weight_store *s, const weight_identity *id,
                                      const char *name, const char *path, const char *args,
                                      const char *mismatch)
{
    char out[8192], want[200];
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), args), 1);
    snprintf(want, sizeof(want), "asked to check cold file %s: node: cold file %s: corrupt", name,
             name);
    if (strstr(out, mismatch) == NULL || strstr(out, want) == NULL ||
        strstr(out, "reported to the master") == NULL)
        fail_msg("weightctl %s said: %s", args, out);
    wx_wait_state(s, id, WEIGHT_DEGRADED, -1);
    for (int i = 0; access(path, F_OK) == 0; i++) {
        if (i * 20 > WAIT_MS) fail_msg("%s was not deleted", name);
        sleep_ms(20);
    }
}

/* Data that rotted under an intact header passes the node's checks of a
 * read (header and size); the reader's checksum fails. The reader then has
 * the node hash the file, the node finds it corrupt and reports it, and the
 * master drops the replica -- as when a read meets a bad header -- for a
 * `weightctl get` (chunk checksums) and a `kv get` (the object's SHA-256)
 * alike. Before, the revision stayed READY, and every reader failed the same
 * way, until an fsck --deep. */
static void test_data_rot_a_reader_meets_is_checked_and_dropped(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity a, b;
    char name[128], path[700], out[8192], arg[900], key[300];
    assert_int_equal(weight_identity_set(&a, NULL, "llm", "rot", "v3", 1), 0);
    assert_int_equal(weight_identity_set(&b, NULL, "llm", "rot", "v4", 1), 0);

    put_cold_and_pick_a_payload_file(f, s, &a, name);
    snprintf(path, sizeof(path), "%s/cold/%s", f->m.dir, name);
    rot_data(path);
    snprintf(arg, sizeof(arg), "--tenant acme get llm/rot/v3@1 --out %s/out-a", f->m.dir);
    assert_reader_reports_rot(f, s, &a, name, path, arg, "do not match the manifest's checksum");
    if (!hx_log_contains(&f->m, "found corrupt or missing by a read (the node's log says which): "
                                "its replica is dropped")) {
        hx_print_log(&f->m);
        fail_msg("the master did not say it dropped the replica of %s", name);
    }

    /* a kv get of the payload object the rotted file holds: its key from
       fsck --deep, which reports without repairing */
    put_cold_and_pick_a_payload_file(f, s, &b, name);
    snprintf(path, sizeof(path), "%s/cold/%s", f->m.dir, name);
    rot_data(path);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "fsck --deep"), 1);
    const char *k = strstr(out, "replica of weights/acme/llm/rot/v4/1/payload/");
    if (k == NULL) fail_msg("fsck --deep said: %s", out);
    k += strlen("replica of ");
    size_t kl = strcspn(k, " \n,;");
    assert_true(kl < sizeof(key));
    memcpy(key, k, kl);
    key[kl] = '\0';
    snprintf(arg, sizeof(arg), "--tenant acme kv get %s %s/out-b", key, f->m.dir);
    assert_reader_reports_rot(f, s, &b, name, path, arg, "do not match its SHA-256");
    weight_store_close(s);
}

/* A migration to COLD relies on cold files an earlier migration wrote and
 * a later one to HOT kept; before the memory goes, the node hashes each file
 * whole. Intact files are released on (counted intact). A file that rotted
 * since (one data byte flipped) is dropped as a corrupt replica, the memory
 * kept, and the migration persists the member anew from memory and then
 * releases: the revision ends READY + COLD and reads back exactly, and a
 * deep fsck is clean. Before, the migration released the only good copy and
 * the revision turned DEGRADED. A first migration's own fresh files are not
 * hashed again. */
static void test_a_release_checks_the_cold_file_it_relies_on(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity a, b;
    char name[128], path[700], out[8192];
    const char *intact = "store_release_cold_checks_total{result=\"intact\"}";
    const char *corrupt = "store_release_cold_checks_total{result=\"corrupt\"}";
    assert_int_equal(weight_identity_set(&a, NULL, "llm", "back", "v1", 1), 0);
    assert_int_equal(weight_identity_set(&b, NULL, "llm", "back", "v2", 1), 0);

    put_cold_and_pick_a_payload_file(f, s, &a, name);
    if (hx_metric(&f->m, intact) != 0 || hx_metric(&f->m, corrupt) != 0)
        fail_msg("a first migration hashed its own files again: %g intact, %g corrupt",
                 hx_metric(&f->m, intact), hx_metric(&f->m, corrupt));
    wx_migrate_and_wait(s, &a, WEIGHT_RES_HOT);
    wx_migrate_and_wait(s, &a, WEIGHT_RES_COLD);
    assert_true(hx_metric(&f->m, intact) >= N_MODEL); /* every payload, the manifest maybe */
    assert_int_equal(hx_metric(&f->m, corrupt), 0);
    wx_get_and_compare(s, &a, model, N_MODEL);

    put_cold_and_pick_a_payload_file(f, s, &b, name);
    snprintf(path, sizeof(path), "%s/cold/%s", f->m.dir, name);
    wx_migrate_and_wait(s, &b, WEIGHT_RES_HOT);
    rot_data(path);
    wx_migrate_and_wait(s, &b, WEIGHT_RES_COLD);
    assert_int_equal(hx_metric(&f->m, corrupt), 1);
    if (!hx_log_contains(&f->m, "does not hold its bytes")) {
        hx_print_log(&f->m);
        fail_msg("the master did not say the file %s was corrupt", name);
    }
    assert_int_equal(wx_get_and_compare(s, &b, model, N_MODEL), 0); /* every byte from cold files */
    wx_get_and_compare(s, &a, model, N_MODEL);
    if (wx_weightctl(&f->m, out, sizeof(out), "fsck --deep") != 0) fail_msg("fsck --deep said: %s", out);
    weight_store_close(s);
}

/* fsck --deep hashes the memory replicas too. One byte of a payload's
 * memory replica flipped in the segment file (a stray write by a process
 * that maps it) passes the plain fsck, which hashes nothing in memory;
 * fsck --deep reports it with its key and place, read-only (exit 1, the
 * revision READY); --deep --repair drops the replica, the plugin repairs
 * the revision from its cold files (it was COLD once), and it reads back
 * exactly from memory again; a last fsck --deep is clean. Before, nothing
 * but a restart of the node found it. */
static void test_fsck_deep_finds_a_memory_replica_that_lost_its_bytes(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity id;
    const char *key = "weights/acme/llm/mem/v1/1/payload/0";
    char out[8192], want[300];
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "mem", "v1", 1), 0);
    wx_put_model(s, &id, model, N_MODEL);
    wx_migrate_and_wait(s, &id, WEIGHT_RES_COLD);
    wx_migrate_and_wait(s, &id, WEIGHT_RES_HOT); /* its cold files stay */

    kvc *c = hx_client(&f->m);
    kvc_object o;
    assert_non_null(c);
    assert_int_equal(kvc_get(c, key, &o), 0);
    kvc_close(c); /* its read lease goes with the connection */
    const kvc_replica *mem = NULL;
    for (size_t i = 0; i < o.n_replicas; i++)
        if (o.replicas[i].kind == SMP_REPLICA_MEMORY) mem = &o.replicas[i];
    assert_non_null(mem);
    flip_byte(mem->segment_path, mem->offset + 100, 0x5a);

    if (wx_weightctl(&f->m, out, sizeof(out), "fsck") != 0) fail_msg("plain fsck said: %s", out);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "fsck --deep"), 1);
    snprintf(want, sizeof(want), "corrupt memory replica of %s at %s+%llu, 4096 bytes\n", key,
             mem->segment, (unsigned long long)mem->offset); /* not its only replica: no warning */
    if (strstr(out, want) == NULL || strstr(out, "0 orphans, 1 corrupt replicas") == NULL ||
        strstr(out, " memory replicas hashed") == NULL)
        fail_msg("fsck --deep said: %s", out);
    weight_metadata md;
    CHECK(s, weight_get_metadata(s, &id, &md, NULL));
    assert_int_equal((int)md.availability, WEIGHT_READY); /* read-only */

    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "fsck --deep --repair"), 0);
    if (strstr(out, "1 corrupt memory replicas dropped") == NULL) fail_msg("fsck --deep --repair said: %s", out);
    for (int i = 0; wx_metric(&f->m, "weight_repairs_total{result=\"succeeded\"}") < 1; i++) {
        if (i * 20 > WAIT_MS) fail_msg("no repair succeeded");
        sleep_ms(20);
    }
    wx_wait_state(s, &id, WEIGHT_READY, WEIGHT_RES_HOT);
    assert_int_equal(wx_get_and_compare(s, &id, model, N_MODEL), N_MODEL * 4096); /* all from memory */
    if (wx_weightctl(&f->m, out, sizeof(out), "fsck --deep") != 0) fail_msg("the last fsck --deep said: %s", out);
    weight_store_close(s);
}

/* `fsck --deep --repair` drops a corrupt memory replica only after hashing
 * it again: the walk of every other replica takes a while (16,000 small
 * objects after it), and the object may be removed and put again meanwhile,
 * its new replica at the very place of the old one (the allocator reuses
 * the lowest hole). That new, sound replica is kept, logged as rewritten
 * since; the object reads back. Before, the repair dropped it by its place
 * alone and the object was left with no replica (found by a trial). */
static void test_a_memory_replica_put_again_before_the_repair_is_kept(void **state)
{
    fixture *f = *state;
    kvc *c = hx_client(&f->m);
    uint8_t good[1024], back[1024];
    char key[32], out[8192];
    uint64_t len = 0;
    assert_non_null(c);
    kvc_track_read_leases(c, 1);
    for (size_t i = 0; i < sizeof(good); i++) good[i] = (uint8_t)(i * 13 + 5);
    assert_int_equal(kvc_put_bytes(c, "mem/bad", good, sizeof(good), SMP_DATA_KV, NULL, 0, NULL), 0);
    for (int i = 0; i < 16000; i++) {
        snprintf(key, sizeof(key), "mem/filler/%05d", i);
        assert_int_equal(kvc_put_bytes(c, key, good, 256, SMP_DATA_KV, NULL, 0, NULL), 0);
    }
    kvc_object o;
    assert_int_equal(kvc_get(c, "mem/bad", &o), 0);
    assert_int_equal(kvc_release_read_leases(c, NULL), 0); /* no lease holds the removal back */
    assert_int_equal(o.replicas[0].kind, SMP_REPLICA_MEMORY);
    flip_byte(o.replicas[0].segment_path, o.replicas[0].offset + 10, 0x81);

    char cmd[1200], found[200];
    snprintf(cmd, sizeof(cmd), "%s/bin/weightctl --master %s fsck --deep --repair 2>&1", BUILD_DIR,
             f->m.socket);
    snprintf(found, sizeof(found), "memory replica of mem/bad at %s+%llu does not hold its bytes",
             o.replicas[0].segment, (unsigned long long)o.replicas[0].offset);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    for (int i = 0; !hx_log_contains(&f->m, found); i++) {
        if (i > 30000) fail_msg("fsck --deep did not find the replica");
        usleep(1000);
    }
    assert_int_equal(kvc_remove(c, "mem/bad"), 0);
    assert_int_equal(kvc_put_bytes(c, "mem/bad", good, sizeof(good), SMP_DATA_KV, NULL, 0, NULL), 0);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    pclose(p);
    if (strstr(out, "1024 bytes (its only replica: once dropped, the object is unreadable") == NULL)
        fail_msg("the report did not say it was the object's only replica: %s", out);
    assert_int_equal(kvc_get_into(c, "mem/bad", back, sizeof(back), &len, 1), 0);
    assert_int_equal(len, sizeof(good));
    assert_memory_equal(back, good, sizeof(good));
    if (!hx_log_contains(&f->m, "memory replica of mem/bad at ") ||
        !hx_log_contains(&f->m, "was rewritten or replaced since it was checked: left alone")) {
        hx_print_log(&f->m);
        fail_msg("the repair did not say it left the new replica alone (the walk ended before the "
                 "object was put again?): %s", out);
    }
    kvc_close(c);
}

/* The last n bytes of text (a long report's end, where its totals are). */
static const char *tail_of(const char *text, size_t n)
{
    size_t len = strlen(text);
    return len > n ? text + len - n : text;
}

/* Objects left with no replica at all are reported by fsck, not called
 * clean. 1,001 plain objects (and one more that stays sound) each have a
 * byte of their only replica -- memory -- flipped; `fsck --deep --repair`
 * drops those replicas and says the store is not whole: exit 1, "1001
 * objects have no replica left", the first 1,000 named in key order and
 * the rest counted; the next plain fsck says the same (--json too). The
 * objects are still listed and unreadable (a get says the data is lost,
 * not just "try again"); `weightctl kv rm` of one takes
 * it off the report, and once the rest are removed fsck is clean and the
 * sound object reads back. (Before, fsck said clean over them.) */
static void test_objects_left_with_no_replica_are_reported(void **state)
{
    enum { LOST = 1001 };
    fixture *f = *state;
    kvc *c = hx_client(&f->m);
    uint8_t bytes[256], back[256];
    char key[64], want[200];
    char *out = malloc(1 << 20);
    uint64_t len = 0;
    assert_non_null(c);
    assert_non_null(out);
    kvc_track_read_leases(c, 1);
    for (size_t i = 0; i < sizeof(bytes); i++) bytes[i] = (uint8_t)(i * 7 + 3);
    assert_int_equal(kvc_put_bytes(c, "plain/ok", bytes, sizeof(bytes), SMP_DATA_KV, NULL, 0, NULL), 0);
    for (int i = 0; i < LOST; i++) {
        snprintf(key, sizeof(key), "plain/lost/%04d", i);
        assert_int_equal(kvc_put_bytes(c, key, bytes, sizeof(bytes), SMP_DATA_KV, NULL, 0, NULL), 0);
        kvc_object o;
        assert_int_equal(kvc_get(c, key, &o), 0);
        assert_int_equal(o.n_replicas, 1);
        assert_int_equal(o.replicas[0].kind, SMP_REPLICA_MEMORY);
        flip_byte(o.replicas[0].segment_path, o.replicas[0].offset + 5, 0x42);
    }
    assert_int_equal(kvc_release_read_leases(c, NULL), 0);

    assert_int_equal(wx_weightctl(&f->m, out, 1 << 20, "fsck --deep --repair"), 1);
    if (strstr(out, "1001 corrupt memory replicas dropped") == NULL ||
        strstr(out, "1001 objects have no replica left") == NULL ||
        strstr(out, "  no replica: plain/lost/0000\n") == NULL ||
        strstr(out, "  no replica: plain/lost/0999\n") == NULL ||
        strstr(out, "  no replica: plain/lost/1000") != NULL ||
        strstr(out, "  ... and 1 more (a report names the first 1000)") == NULL)
        fail_msg("fsck --deep --repair said: ...%s", tail_of(out, 400));
    assert_int_equal(wx_weightctl(&f->m, out, 1 << 20, "--json fsck"), 1);
    if (strstr(out, "\"objects_without_replica\":1001,\"objects_without_replica_keys\":[\"plain/lost/0000\",") ==
        NULL)
        fail_msg("fsck --json said: ...%s", tail_of(out, 400));
    assert_true(kvc_get_into(c, "plain/lost/0000", back, sizeof(back), &len, 1) < 0);
    assert_int_equal(wx_weightctl(&f->m, out, 1 << 20, "kv get plain/lost/0000 -"), 1);
    if (strstr(out, "it has no replica left (its data is lost") == NULL) /* not a bare "try again" */
        fail_msg("kv get of a lost object said: %s", out);

    assert_int_equal(wx_weightctl(&f->m, out, 1 << 20, "kv rm plain/lost/0000"), 0);
    assert_int_equal(wx_weightctl(&f->m, out, 1 << 20, "fsck"), 1);
    if (strstr(out, "1000 objects have no replica left") == NULL ||
        strstr(out, "  no replica: plain/lost/0000\n") != NULL ||
        strstr(out, "  no replica: plain/lost/1000\n") == NULL || strstr(out, "... and") != NULL)
        fail_msg("fsck after kv rm said: ...%s", tail_of(out, 400));
    uint64_t removed = 0, skipped = 0;
    assert_int_equal(kvc_remove_prefix(c, "plain/lost/", &removed, &skipped), 0);
    assert_int_equal(removed, LOST - 1);
    snprintf(want, sizeof(want), "clean\n");
    if (wx_weightctl(&f->m, out, 1 << 20, "fsck") != 0 || strstr(out, want) == NULL)
        fail_msg("the last fsck said: ...%s", tail_of(out, 400));
    assert_int_equal(kvc_get_into(c, "plain/ok", back, sizeof(back), &len, 1), 0);
    assert_memory_equal(back, bytes, sizeof(bytes));
    kvc_close(c);
    free(out);
}

/* Write text over the file at path. */
static void set_fsck_last(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Lines of the master's log holding needle; with pages, the page count of
 * the last line of a background fsck's node report. */
static unsigned scan_log(fixture *f, const char *needle, unsigned *pages)
{
    char *line = NULL;
    size_t cap = 0;
    unsigned n = 0;
    FILE *lf = fopen(f->m.log, "r");
    assert_non_null(lf);
    while (getline(&line, &cap, lf) > 0) {
        const char *at = strstr(line, " bytes read in ");
        if (needle != NULL && strstr(line, needle) != NULL) n++;
        if (pages != NULL && strstr(line, "background fsck: node embedded: ") != NULL && at != NULL)
            *pages = (unsigned)strtoul(at + strlen(" bytes read in "), NULL, 10);
    }
    free(line);
    fclose(lf);
    return n;
}

static unsigned log_count(fixture *f, const char *needle)
{
    return scan_log(f, needle, NULL);
}

static void log_count_pages(fixture *f, unsigned *pages)
{
    (void)scan_log(f, NULL, pages);
}

/* A model of 320 tensors of 4 KiB: 1.25 MiB of data in cold files. */
#define N_MANY 320
static wx_tensor many[N_MANY];
static char many_names[N_MANY][16];

/* The background fsck (fsck.every_s) finds data rot nobody read. Its last
 * start kept in data_dir/fsck.last is long past, so one starts once the
 * node registered after the restart; it reads the cold files in pages of a
 * second of its pace (1 MiB/s: two pages or more for the 1.25 MiB of a 320
 * tensor revision), drops the replica of the rotted file -- the COLD
 * revision turns DEGRADED now, not when a load needs the copy -- and logs
 * the file, its key and the totals; the other revision stays READY and
 * reads back; /metrics counts the run and the corrupt file, and fsck.last
 * holds the new start, so the next waits fsck.every_s. */
static void test_the_background_fsck_finds_rot_nobody_read(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity rot, fine;
    char name[128], path[700], want[1000], last[700];
    for (size_t i = 0; i < N_MANY; i++) {
        snprintf(many_names[i], sizeof(many_names[i]), "t.%03zu", i);
        many[i] = (wx_tensor){.name = many_names[i], .shape = {16, 64}};
    }
    wx_model_fill(many, N_MANY, 7);
    assert_int_equal(weight_identity_set(&rot, NULL, "llm", "rot", "v9", 1), 0);
    assert_int_equal(weight_identity_set(&fine, NULL, "llm", "many", "v1", 1), 0);
    put_cold_and_pick_a_payload_file(f, s, &rot, name);
    wx_put_model(s, &fine, many, N_MANY);
    wx_migrate_and_wait(s, &fine, WEIGHT_RES_COLD);
    weight_store_close(s);
    snprintf(path, sizeof(path), "%s/cold/%s", f->m.dir, name);
    rot_data(path);

    assert_int_equal(hx_stop(&f->m), 0);
    snprintf(last, sizeof(last), "%s/data/fsck.last", f->m.dir);
    set_fsck_last(last, "1000\n"); /* 1970: the next run is due */
    /* what a master that died while writing fsck.last leaves (an hour
     * old), and one being written right now (kept) */
    char stale[800], fresh[800];
    snprintf(stale, sizeof(stale), "%s.4242.tmp", last);
    snprintf(fresh, sizeof(fresh), "%s.4243.tmp", last);
    set_fsck_last(stale, "1000\n");
    set_fsck_last(fresh, "1000\n");
    struct timeval hour_ago[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    assert_int_equal(utimes(stale, hour_ago), 0);
    assert_int_equal(configure(f, "fsck:\n  every_s: 86400\n  bytes_per_s: 1048576\n"), 0);
    uint64_t restarted = (uint64_t)time(NULL) * 1000u;
    assert_int_equal(hx_start(&f->m, 20000), 0);
    for (int i = 0; !hx_log_contains(&f->m, "background fsck: ended:"); i++) {
        if (i * 20 > 2 * WAIT_MS) {
            hx_print_log(&f->m);
            fail_msg("no background fsck ended");
        }
        sleep_ms(20);
    }
    snprintf(want, sizeof(want), "background fsck: node embedded: cold file %s of "
             "weights/acme/llm/rot/v9/1/payload/", name);
    if (!hx_log_contains(&f->m, "background fsck: started: the cold files of every node that is "
                                "up, at 1048576 bytes/s each (fsck.every_s 86400)") ||
        !hx_log_contains(&f->m, want) ||
        !hx_log_contains(&f->m, "background fsck: ended: 1 nodes checked (0 ended in an error, 0 "
                                "not up)") ||
        !hx_log_contains(&f->m, " 1 corrupt, 1 of their replicas dropped, 0 files no replica names; "
                                "1 objects have no replica left")) {
        hx_print_log(&f->m);
        fail_msg("the log does not tell the background fsck's findings");
    }
    /* paced: more than one page of a second's reading */
    unsigned pages = 0;
    log_count_pages(f, &pages);
    if (pages < 2) fail_msg("the background fsck read the cold files in %u page(s)", pages);
    assert_int_equal(access(stale, F_OK), -1);
    assert_int_equal(access(fresh, F_OK), 0);
    snprintf(want, sizeof(want), "background fsck: removed %s, left by a master that stopped "
             "while writing it", stale);
    if (!hx_log_contains(&f->m, want)) fail_msg("no line says %s was removed", stale);
    assert_int_equal(unlink(fresh), 0);

    FILE *fp;
    s = wx_open_store(&f->m);
    wx_wait_state(s, &rot, WEIGHT_DEGRADED, -1);
    wx_wait_state(s, &fine, WEIGHT_READY, WEIGHT_RES_COLD);
    wx_get_and_compare(s, &fine, many, N_MANY);
    assert_int_equal(wx_metric(&f->m, "store_fsck_background_runs_total"), 1);
    assert_int_equal(wx_metric(&f->m, "store_fsck_background_corrupt_total"), 1);
    assert_int_equal(wx_metric(&f->m, "store_fsck_background_running"), 0);
    fp = fopen(last, "r");
    assert_non_null(fp);
    unsigned long long began = 0;
    assert_int_equal(fscanf(fp, "%llu", &began), 1);
    fclose(fp);
    if (began < restarted) fail_msg("fsck.last holds %llu, before the restart", began);
    remove_and_check_clean(f, s, &rot);
    weight_store_close(s);

    /* A stop while a run waits for its next page ends it unjudged (the
     * master exits 0: in the sanitizer build, nothing leaked) with its
     * place in fsck.last; the next start resumes it there and reads only
     * the files after it. */
    assert_int_equal(hx_stop(&f->m), 0);
    set_fsck_last(last, "1000\n");
    assert_int_equal(hx_start(&f->m, 20000), 0);
    char text[4096] = "";
    for (int i = 0; strstr(text, "\nat embedded ") == NULL || strstr(text, ".cold\n") == NULL; i++) {
        if (i * 10 > 2 * WAIT_MS) fail_msg("fsck.last never said where the check is: %s", text);
        sleep_ms(10);
        hx_read_text(last, text, sizeof(text));
    }
    assert_int_equal(hx_stop(&f->m), 0);
    hx_read_text(last, text, sizeof(text));
    if (strstr(text, "\nat embedded ") == NULL) fail_msg("the stop left fsck.last: %s", text);
    /* Lines that do not parse are ignored and said so -- a long one whole:
     * read in pieces, its tail would have read "done embedded" */
    FILE *ap = fopen(last, "a");
    assert_non_null(ap);
    fprintf(ap, "nonsense\nat embedded %01019d", 0);
    fputs("done embedded\n", ap);
    fclose(ap);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    for (int i = 0; log_count(f, "background fsck: ended:") < 2; i++) {
        if (i * 20 > 2 * WAIT_MS) fail_msg("the resumed background fsck did not end");
        sleep_ms(20);
    }
    if (log_count(f, "background fsck: resumed: ") != 1) fail_msg("the check was not resumed");
    if (log_count(f, "/data/fsck.last: 2 line(s) that are not \"at NODE FILE\" ignored (those "
                     "nodes wait for the next run)") != 1)
        fail_msg("the lines of fsck.last that do not parse were not told");
    unsigned long long resumed = hx_background_fsck_files(&f->m, 2), all = cold_files_of_size(f, -1, NULL, 0);
    if (resumed == 0 || resumed >= all)
        fail_msg("the resumed check read %llu cold files of the %llu there are", resumed, all);
    hx_read_text(last, text, sizeof(text));
    if (strchr(text, '\n') != text + strlen(text) - 1) fail_msg("fsck.last after the end: %s", text);
    assert_int_equal(hx_stop(&f->m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cold_survives_the_loss_of_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weightctl_repair, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_new_segment_file_is_mapped_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_cold_file_a_read_finds_corrupt_is_dropped, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fsck_reports_and_drops_a_corrupt_replica, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fsck_deep_finds_data_that_rotted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_data_rot_a_reader_meets_is_checked_and_dropped, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_release_checks_the_cold_file_it_relies_on, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fsck_deep_finds_a_memory_replica_that_lost_its_bytes,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_memory_replica_put_again_before_the_repair_is_kept,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_objects_left_with_no_replica_are_reported, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_background_fsck_finds_rot_nobody_read, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
