/* test_weight_reclaim.c -- reclamation of a node's disk and memory, on a
 * real master with the real weight_mgmt.so and its embedded node.
 *
 * Revisions are published and read with libweightclient. Pinned here: the
 * cold files of a deleted revision leave the node's cold directory, also
 * when the unlink never happened (a crash between the delete record and
 * the unlink: the file is put back while the master is stopped, and the
 * node's registration deletes it); `weightctl fsck` reports an orphan cold
 * file and bytes written into an unoccupied segment range, `--repair`
 * removes both, a second fsck is clean, the bytes on disk match /metrics
 * and the READY revisions read back exactly; bytes a crashed master's put
 * left in the segment are swept when the node registers again. */
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
#include "weightclient.h"

#define WAIT_MS 30000 /* generous: the machine is shared */

/* -- a small model --------------------------------------------------------------- */

static wx_tensor model[] = {
    {"embed.weight", {32, 32}, {0}},
    {"layers.0.w", {16, 64}, {0}},
};
#define N_MODEL (sizeof(model) / sizeof(model[0]))

/* -- the master -------------------------------------------------------------------- */

typedef struct fixture {
    hx_master m;
    char cold[400];
    char shm[400];
} fixture;

/* The master with an 8 MiB segment; prefault: with node.segment_prefault,
 * started once the node logged that every page is touched; short_puts: a
 * put is stale after 3 s (node.put_timeout_ms, its tickets 1 s). */
static int setup_with(void **state, int prefault, int short_puts)
{
    fixture *f = calloc(1, sizeof(*f));
    char cfg[2048];
    wx_model_fill(model, N_MODEL, 37);
    if (f == NULL || hx_init(&f->m, "reclaim", NULL) < 0) return -1;
    snprintf(f->cold, sizeof(f->cold), "%s/cold", f->m.dir);
    snprintf(f->shm, sizeof(f->shm), "%s/shm", f->m.dir);
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s\"\n  segment_bytes: 8388608\n  segment_prefault: %s\n"
             "  cold_dir: \"%s\"\n  poll_ms: 10\n%s"
             "cluster:\n  default_weight_preferred_residency: hot\n"
             "  weight_migration_cooldown_ms: 100\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n",
             f->shm, prefault ? "true" : "false", f->cold,
             short_puts ? "  put_timeout_ms: 3000\n  ticket_ttl_ms: 1000\n" : "", BUILD_DIR);
    if (hx_reconfigure(&f->m, cfg) < 0 || hx_start(&f->m, 20000) < 0) return -1;
    for (int i = 0; prefault && i < 6000 && !hx_log_contains(&f->m, "bytes pre-faulted in"); i++)
        usleep(10 * 1000);
    if (prefault && !hx_log_contains(&f->m, "8388608 bytes pre-faulted in")) return -1;
    *state = f;
    return 0;
}

static int setup(void **state)
{
    return setup_with(state, 0, 0);
}

static int setup_short_puts(void **state)
{
    return setup_with(state, 0, 1);
}

/* The segment's free space is zeroed data, not holes, once pre-faulted:
 * the sweeps and fsck read it through the node's mapping. */
static int setup_prefault(void **state)
{
    return setup_with(state, 1, 0);
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

/* Poll until id is READY at residency res with no active operation. */
static weight_metadata wait_ready(weight_store *s, const weight_identity *id, int res)
{
    weight_metadata md;
    for (int i = 0; i * 20 < WAIT_MS; i++) {
        CHECK(s, weight_get_metadata(s, id, &md, NULL));
        if (md.availability == WEIGHT_READY && (int)md.residency == res && md.operation_id == 0)
            return md;
        sleep_ms(20);
    }
    fail_msg("%s: %s %s after %d ms", id->resource_id, weight_availability_name((int)md.availability),
             weight_residency_name((int)md.residency), WAIT_MS);
    return md;
}

static void migrate_cold(weight_store *s, const weight_identity *id)
{
    weight_operation op;
    weight_metadata md = wait_ready(s, id, WEIGHT_RES_HOT);
    CHECK(s, weight_migrate(s, id, WEIGHT_RES_COLD, 0, md.metadata_generation, &op));
    wait_ready(s, id, WEIGHT_RES_COLD);
}

/* Delete id and wait until its deletion ended (DELETED tombstone). */
static void remove_and_wait(weight_store *s, const weight_identity *id)
{
    weight_metadata md;
    CHECK(s, weight_get_metadata(s, id, &md, NULL));
    CHECK(s, weight_remove(s, id, md.metadata_generation, &md));
    for (int i = 0; i * 20 < WAIT_MS; i++) {
        int rc = weight_get_metadata(s, id, &md, NULL);
        if (rc != 0 || (md.availability == WEIGHT_DELETED && md.operation_id == 0)) return;
        sleep_ms(20);
    }
    fail_msg("%s: the deletion did not end in %d ms", id->resource_id, WAIT_MS);
}

/* The key recorded in the header of a cold file (node_cold.h: u16 length at
 * 56, the key at 58), or "" when it cannot be read. */
static void cold_file_key(const char *path, char *key, size_t cap)
{
    uint8_t hdr[58 + 1024];
    key[0] = '\0';
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    ssize_t n = pread(fd, hdr, sizeof(hdr), 0);
    close(fd);
    if (n < 58) return;
    size_t len = ((size_t)hdr[56] << 8) | hdr[57];
    if (len >= cap || (ssize_t)(58 + len) > n) return;
    memcpy(key, hdr + 58, len);
    key[len] = '\0';
}

/* The .cold files of dir whose key starts with prefix ("": all); the path
 * of the first goes to first (may be NULL). */
static int cold_files(const char *dir, const char *prefix, char *first, size_t cap)
{
    int k = 0;
    char path[1024], key[1100];
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".cold") != 0) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        cold_file_key(path, key, sizeof(key));
        if (strncmp(key, prefix, strlen(prefix)) != 0) continue;
        if (k++ == 0 && first != NULL) snprintf(first, cap, "%s", path);
    }
    closedir(d);
    return k;
}

/* Wait until dir holds no cold file under prefix. */
static void wait_no_cold_files(const char *dir, const char *prefix)
{
    for (int i = 0; cold_files(dir, prefix, NULL, 0) > 0; i++) {
        if (i * 20 > WAIT_MS) fail_msg("%s still holds %d cold files of %s", dir,
                                       cold_files(dir, prefix, NULL, 0), prefix);
        sleep_ms(20);
    }
}

static int copy_file(const char *from, const char *to)
{
    char buf[65536];
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0600), rc = 0;
    ssize_t n;
    if (in < 0 || out < 0) rc = -1;
    while (rc == 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n) rc = -1;
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    return rc;
}

/* The number after the first "field": of a JSON text (-1: none). */
static long long json_num(const char *json, const char *field)
{
    char needle[128];
    snprintf(needle, sizeof(needle), "\"%s\":", field);
    const char *at = strstr(json, needle);
    return at ? strtoll(at + strlen(needle), NULL, 10) : -1;
}

/* The data bytes of every .cold file in dir: file size minus the header. */
static long long cold_data_bytes(const char *dir)
{
    long long sum = 0;
    char path[1024];
    struct stat st;
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".cold") != 0) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        assert_int_equal(stat(path, &st), 0);
        sum += (long long)st.st_size - 4096;
    }
    closedir(d);
    return sum;
}

/* The path of the one segment file in dir. */
static void segment_file(const char *dir, char *out, size_t cap)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    out[0] = '\0';
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".seg") == 0) snprintf(out, cap, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    assert_true(out[0] != '\0');
}

/* -- tests --------------------------------------------------------------------- */

/* Cold files of deleted replicas are removed: a revision migrated to COLD
 * has its payloads and manifest in the node's cold directory; once it is
 * deleted none of them is left, while another revision's files stay. */
static void test_cold_files_of_a_deleted_revision_are_removed(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity gone, kept;
    assert_int_equal(weight_identity_set(&gone, NULL, "llm", "gone", "v1", 1), 0);
    assert_int_equal(weight_identity_set(&kept, NULL, "llm", "kept", "v1", 1), 0);
    wx_put_model(s, &gone, model, N_MODEL);
    wx_put_model(s, &kept, model, N_MODEL);
    migrate_cold(s, &gone);
    migrate_cold(s, &kept);
    assert_true(cold_files(f->cold, "weights/acme/llm/gone/", NULL, 0) >= (int)N_MODEL);
    int kept_files = cold_files(f->cold, "weights/acme/llm/kept/", NULL, 0);
    assert_true(kept_files >= (int)N_MODEL);

    remove_and_wait(s, &gone);
    wait_no_cold_files(f->cold, "weights/acme/llm/gone/");
    assert_int_equal(cold_files(f->cold, "weights/acme/llm/kept/", NULL, 0), kept_files);
    weight_store_close(s);
}

/* Hard-link every .cold file of dir whose key starts with prefix into
 * to (a directory it creates); returns how many. */
static int save_cold_files(const char *dir, const char *prefix, const char *to)
{
    int k = 0;
    char path[1400], saved[1400], key[1100];
    assert_int_equal(mkdir(to, 0700), 0);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".cold") != 0) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        cold_file_key(path, key, sizeof(key));
        if (strncmp(key, prefix, strlen(prefix)) != 0) continue;
        snprintf(saved, sizeof(saved), "%s/%s", to, e->d_name);
        assert_int_equal(link(path, saved), 0);
        k++;
    }
    closedir(d);
    return k;
}

/* Move every file of from (save_cold_files) back into dir. */
static void restore_cold_files(const char *from, const char *dir)
{
    char path[1400], saved[1400];
    DIR *d = opendir(from);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        snprintf(saved, sizeof(saved), "%s/%s", from, e->d_name);
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        assert_int_equal(rename(saved, path), 0);
    }
    closedir(d);
}

/* How many lines of the master's log hold needle. */
static int log_lines(const hx_master *m, const char *needle)
{
    char line[4096];
    int n = 0;
    FILE *fp = fopen(m->log, "r");
    while (fp != NULL && fgets(line, sizeof(line), fp) != NULL) n += strstr(line, needle) != NULL;
    if (fp != NULL) fclose(fp);
    return n;
}

/* ... also after a crash between the delete record and the unlink: the
 * files of the deleted revision put back while the master is stopped (the
 * unlinks that never happened) are deleted when the node registers again,
 * and one log line says how many (not a line per file). */
static void test_cold_file_left_by_a_crash_is_removed_at_registration(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity id;
    char saved[1100], want[200];
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "crash", "v1", 1), 0);
    wx_put_model(s, &id, model, N_MODEL);
    migrate_cold(s, &id);
    snprintf(saved, sizeof(saved), "%s/saved", f->m.dir);
    int files = save_cold_files(f->cold, "weights/acme/llm/crash/", saved);
    assert_true(files > 1);
    remove_and_wait(s, &id);
    wait_no_cold_files(f->cold, "weights/acme/llm/crash/");
    weight_store_close(s);

    assert_int_equal(hx_stop(&f->m), 0);
    restore_cold_files(saved, f->cold);
    assert_int_equal(cold_files(f->cold, "weights/acme/llm/crash/", NULL, 0), files);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    wait_no_cold_files(f->cold, "weights/acme/llm/crash/");
    assert_int_equal(log_lines(&f->m, "belong to no replica; deleting them"), 1);
    assert_int_equal(log_lines(&f->m, "belongs to no replica"), 0); /* no line per file */
    snprintf(want, sizeof(want), ": %d cold file(s), ", files);
    assert_true(hx_log_contains(&f->m, want));
    assert_true(hx_log_contains(&f->m, "(weights/acme/llm/crash/"));
    snprintf(want, sizeof(want), "deleting them (%d queued): ", files);
    assert_true(hx_log_contains(&f->m, want));
}

/* weightctl fsck (read-only by default, --repair to act): a cold file of a
 * deleted revision put back behind the master's back, and 4 KiB written
 * into an unoccupied range of the segment (bytes no object owns), are
 * reported and nothing is changed; --repair deletes the file and zeroes the
 * bytes; a second fsck is clean; the cold files' data bytes on disk equal
 * store_replica_bytes{kind="cold"} and the segment's occupied bytes equal
 * store_memory_used_bytes; both READY revisions read back exactly. */
static void test_fsck_reports_and_repairs_orphans(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity hot, cold, gone;
    char file[1024], saved[1100], seg[1024], out[16384];
    assert_int_equal(weight_identity_set(&hot, NULL, "llm", "hot", "v1", 1), 0);
    assert_int_equal(weight_identity_set(&cold, NULL, "llm", "cold", "v1", 1), 0);
    assert_int_equal(weight_identity_set(&gone, NULL, "llm", "gone", "v1", 1), 0);
    wx_put_model(s, &hot, model, N_MODEL);
    wx_put_model(s, &cold, model, N_MODEL);
    wx_put_model(s, &gone, model, N_MODEL);
    migrate_cold(s, &cold);
    migrate_cold(s, &gone);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "--tenant acme fsck"), 0);
    if (strstr(out, "clean") == NULL) fail_msg("a fresh store is not clean: %s", out);

    /* an orphan cold file: a deleted revision's file, back after its unlink */
    assert_true(cold_files(f->cold, "weights/acme/llm/gone/", file, sizeof(file)) > 0);
    snprintf(saved, sizeof(saved), "%s/saved.bin", f->m.dir);
    assert_int_equal(copy_file(file, saved), 0);
    remove_and_wait(s, &gone);
    wait_no_cold_files(f->cold, "weights/acme/llm/gone/");
    assert_int_equal(rename(saved, file), 0);
    /* segment bytes no object owns: the last 8 KiB of the 8 MiB segment are
     * unoccupied (first fit from offset 0); write 4 KiB of them */
    segment_file(f->shm, seg, sizeof(seg));
    uint8_t junk[4096];
    memset(junk, 0xab, sizeof(junk));
    int fd = open(seg, O_RDWR);
    assert_true(fd >= 0);
    const off_t at = 8388608 - 8192;
    assert_int_equal(pwrite(fd, junk, sizeof(junk), at), (ssize_t)sizeof(junk));

    /* read-only: both reported, nothing changed */
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "--tenant acme --json fsck"), 1);
    if (json_num(out, "orphans") != 2 || json_num(out, "orphan_segment_bytes") != 4096 ||
        json_num(out, "offset") != (long long)at || strstr(out, strrchr(file, '/') + 1) == NULL)
        fail_msg("fsck reported: %s", out);
    assert_int_equal(access(file, F_OK), 0);
    uint8_t back[4096];
    assert_int_equal(pread(fd, back, sizeof(back), at), (ssize_t)sizeof(back));
    assert_memory_equal(back, junk, sizeof(junk));

    /* --repair removes both */
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "--tenant acme --json fsck --repair"), 0);
    if (json_num(out, "files_removed") != 1 || json_num(out, "segment_bytes_zeroed") != 4096)
        fail_msg("fsck --repair reported: %s", out);
    assert_int_equal(access(file, F_OK), -1);
    assert_int_equal(pread(fd, back, sizeof(back), at), (ssize_t)sizeof(back));
    for (size_t i = 0; i < sizeof(back); i++) assert_int_equal(back[i], 0);
    close(fd);

    /* a second fsck is clean, and disk agrees with /metrics */
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "--tenant acme --json fsck"), 0);
    if (json_num(out, "orphans") != 0) fail_msg("fsck after the repair: %s", out);
    long long cold_gauge = wx_metric(&f->m, "store_replica_bytes{kind=\"cold\"}");
    assert_true(cold_gauge > 0);
    assert_int_equal(cold_data_bytes(f->cold), cold_gauge);
    assert_int_equal(json_num(out, "cold_bytes_on_disk"), cold_gauge);
    assert_int_equal(json_num(out, "segment_used_bytes"), wx_metric(&f->m, "store_memory_used_bytes"));
    wx_get_and_compare(s, &hot, model, N_MODEL);
    wx_get_and_compare(s, &cold, model, N_MODEL);
    weight_store_close(s);
}


/* Start a 64 KiB put of key and write 0x5c into its range through the
 * segment file, as a writer does before its put end; the client is
 * returned with the put still open, *where its range. */
static kvc *start_put_and_write(fixture *f, const char *key, kvc_replica *where)
{
    kvc *c = hx_client(&f->m);
    assert_non_null(c);
    memset(where, 0, sizeof(*where));
    assert_int_equal(kvc_put_start(c, key, 65536, SMP_DATA_KV, NULL, 0, where), 0);
    uint8_t junk[65536];
    memset(junk, 0x5c, sizeof(junk));
    int fd = open(where->segment_path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, junk, sizeof(junk), (off_t)where->offset), (ssize_t)sizeof(junk));
    close(fd);
    return c;
}
/* Wait (30 s at most) until the len bytes at offset of the segment file seg
 * read zero and a read-only fsck is clean; what names them in the failure.
 * A clean fsck alone does not say the bytes are gone: while a sweep's SCRUB
 * runs, its range is held in the allocator, which fsck does not judge. */
static void wait_swept(fixture *f, const char *seg, uint64_t offset, size_t len, const char *what)
{
    char out[16384];
    uint8_t *back = malloc(len);
    int fd = open(seg, O_RDONLY);
    assert_non_null(back);
    assert_true(fd >= 0);
    for (int i = 0;; i++) {
        int rc = wx_weightctl(&f->m, out, sizeof(out), "--json fsck");
        size_t first = 0;
        assert_int_equal(pread(fd, back, len, (off_t)offset), (ssize_t)len);
        while (first < len && back[first] == 0) first++;
        if (rc == 0 && json_num(out, "orphans") == 0 && first == len) break;
        if (i == 1500)
            fail_msg("%s: byte %zu is %#x after the sweeps; fsck: %s", what, first,
                     first < len ? back[first] : 0, out);
        usleep(20000);
    }
    close(fd);
    free(back);
}

/* A put whose master was killed between the allocation and the commit:
 * the client wrote its range (co-located, through the segment file) and the
 * master died before the put end. The put had no record, but its write
 * zone had: the restarted master holds the zone's free bytes back from the
 * start (the writer may still be copying), so the node's registration
 * sweep leaves them, and so does fsck (held bytes are not orphans); the
 * dead master's writer copying again later damages nothing. Once a stale
 * put's time has passed (3 s here) they are given back and zeroed: the
 * range reads zeros, a read-only fsck is clean, and the READY revision
 * reads back. (Before the zones, the registration zeroed the range at once
 * and the next put could be placed there while the writer still copied.) */
static void test_a_put_lost_with_its_master_is_swept_at_restart(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "kept", "v1", 1), 0);
    wx_put_model(s, &id, model, N_MODEL);
    weight_store_close(s);

    kvc_replica where;
    kvc *c = start_put_and_write(f, "lost/put", &where);
    char seg[1024];
    snprintf(seg, sizeof(seg), "%s", where.segment_path);
    kvc_close(c);
    hx_kill(&f->m);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    assert_true(hx_log_contains(&f->m, " free bytes of the write zones of the master before "
                                       "held back for 3000 ms"));
    assert_true(hx_metric(&f->m, "store_write_zone_held_bytes") >= 65536);

    /* the dead master's writer copies again: into held bytes */
    uint8_t junk[4096], back[4096];
    memset(junk, 0x77, sizeof(junk));
    int fd = open(seg, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, junk, sizeof(junk), (off_t)where.offset), (ssize_t)sizeof(junk));
    assert_int_equal(pread(fd, back, sizeof(back), (off_t)where.offset), (ssize_t)sizeof(back));
    assert_memory_equal(back, junk, sizeof(junk));
    close(fd);
    wait_swept(f, seg, where.offset, 65536, "the lost put's range, given back");
    assert_true(hx_metric(&f->m, "store_write_zone_held_bytes") == 0);
    s = wx_open_store(&f->m);
    wx_get_and_compare(s, &id, model, N_MODEL);
    weight_store_close(s);
}

/* A put given up after its writer wrote (revoked by the client) leaves
 * nothing behind: its range is scrubbed on the node right away, so fsck
 * finds no orphan bytes without --repair. (Before, only ranges of replicas
 * the state dropped were scrubbed, and this one stayed until fsck --repair.) */
static void test_revoked_put_leaves_no_bytes(void **state)
{
    fixture *f = *state;
    char out[16384];
    kvc_replica where;
    kvc *c = start_put_and_write(f, "given/up", &where);
    assert_int_equal(kvc_put_revoke(c, "given/up"), 0);
    kvc_close(c);
    for (int i = 0;; i++) { /* the SCRUB task runs at the node's next poll */
        int rc = wx_weightctl(&f->m, out, sizeof(out), "--json fsck");
        if (rc == 0 && json_num(out, "orphans") == 0) break;
        if (i == 200) fail_msg("fsck after the revoke: %s", out);
        usleep(20000);
    }
}

/* Ranges freed together are zeroed together: 32 objects of 64 KiB, each
 * range written with 0x5c through the segment file before its put end,
 * removed by one REMOVE_PREFIX. The node is sent one SCRUB task for the
 * 32 ranges (store_scrub_tasks_total 1, store_scrub_ranges_total 32 more
 * than before: the ranges freed, which the task carries joined where they
 * touch), not a task each; every byte reads zero after, and fsck is
 * clean. */
static void test_ranges_freed_together_are_zeroed_in_one_task(void **state)
{
    enum { N = 32, SIZE = 65536 };
    fixture *f = *state;
    char out[16384], key[32];
    kvc_replica where[N];
    uint8_t junk[SIZE], sum[32];
    memset(junk, 0x5c, sizeof(junk));
    hx_sha256(junk, sizeof(junk), sum);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "batch/%02d", i);
        kvc *c = start_put_and_write(f, key, &where[i]);
        assert_int_equal(kvc_put_end(c, key, sum, NULL), 0);
        kvc_close(c);
    }
    double tasks = hx_metric(&f->m, "store_scrub_tasks_total");
    double ranges = hx_metric(&f->m, "store_scrub_ranges_total");
    kvc *c = hx_client(&f->m);
    assert_non_null(c);
    uint64_t removed = 0, skipped = 0;
    assert_int_equal(kvc_remove_prefix(c, "batch/", &removed, &skipped), 0);
    kvc_close(c);
    assert_int_equal(removed, N);
    for (int i = 0;; i++) { /* the task runs at the node's next poll */
        int rc = wx_weightctl(&f->m, out, sizeof(out), "--json fsck");
        if (rc == 0 && json_num(out, "orphans") == 0) break;
        if (i == 200) fail_msg("fsck after the removal: %s", out);
        usleep(20000);
    }
    assert_true(hx_metric(&f->m, "store_scrub_ranges_total") - ranges == N);
    if (hx_metric(&f->m, "store_scrub_tasks_total") - tasks != 1)
        fail_msg("%.0f SCRUB tasks for %d ranges freed by one record",
                 hx_metric(&f->m, "store_scrub_tasks_total") - tasks, N);
    uint8_t back[SIZE];
    for (int i = 0; i < N; i++) {
        int fd = open(where[i].segment_path, O_RDONLY);
        assert_true(fd >= 0);
        assert_int_equal(pread(fd, back, sizeof(back), (off_t)where[i].offset), (ssize_t)sizeof(back));
        close(fd);
        for (size_t k = 0; k < sizeof(back); k++)
            if (back[k] != 0) fail_msg("byte %zu of object %d's range is %#x", k, i, back[k]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cold_files_of_a_deleted_revision_are_removed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cold_file_left_by_a_crash_is_removed_at_registration,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_fsck_reports_and_repairs_orphans, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fsck_reports_and_repairs_orphans, setup_prefault,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_put_lost_with_its_master_is_swept_at_restart,
                                        setup_short_puts, teardown),
        cmocka_unit_test_setup_teardown(test_revoked_put_leaves_no_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranges_freed_together_are_zeroed_in_one_task, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
