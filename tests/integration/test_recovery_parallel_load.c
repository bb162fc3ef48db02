/* test_recovery_parallel_load.c -- a restart loads the host's objects section
 * on a thread of its own while the plugins load theirs (master_recovery.c):
 * what a plugin sees and what a failure on either side does, on a real
 * master.
 *
 * tests/plugins/objects_probe.so classifies every member of the host API
 * table it is handed (by offset, up to the host's struct_size) and, as its
 * own section loads, calls each member that reads or changes objects -- the
 * one its config names `first` before any other -- then asks for the whole
 * group "probe": member count, every member (group_list), each again
 * (object_get), the memory in use. RPC service 43 `seen` replies with what
 * it saw, `members` with the members it calls. This file's table holds the
 * answer each member must give on the snapshot and on an empty store: a
 * member the probe calls without an entry here (or the reverse), or one the
 * probe has not classified, fails the test. A restart from a snapshot
 * holding 300 members, once with each member first, must show every one of
 * them its answer on the whole snapshot, and a write during the load changes
 * nothing (the log is replayed after the sections: SMP_ESTATE). A snapshot
 * whose objects section is checksummed but does not decode, a probe that
 * refuses its section, and both at once each refuse the start with the
 * cause named (the objects' when both fail), exit status 1, no sanitizer
 * report, and not a byte of data/oplog or data/snapshots changed. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "kv_client.h"
#include "rpc_client.h"
#include "snapshot.h"

#define PROBE_PATH BUILD_DIR "/lib/testplugins/objects_probe.so"
#define PROBE_SERVICE 43
#define PROBE_SEEN 1
#define PROBE_MEMBERS 2
#define PROBE_KEY "probe/member/0299" /* the probe's default key: the last member */
#define START_MS 10000
#define MEMBERS 300
#define OTHERS 20
#define CONTENT "payload of a probe member"

/* Every host API member that reads or changes objects, in the probe's
 * order, and its answer during the section load on the snapshot (key
 * PROBE_KEY and group "probe" present; NULL: the memory in use) and on an
 * empty store. Each write answers from what it finds and changes nothing. */
typedef struct touching {
    const char *name;
    const char *loaded;
    const char *empty;
} touching;

static const touching members[] = {
    {"object_get", "OK", "SMP_ENOTFOUND"},
    {"group_list", "300", "0"},
    {"group_count", "300", "0"},
    /* no append before the replay; the answer depends on the objects only
     * when another plugin owns the group */
    {"group_set_managed", "SMP_ESTATE", "SMP_ESTATE"},
    /* the node holding the memory replica has not registered yet: nothing
     * readable to copy from */
    {"ensure_cold", "SMP_EAGAIN", "SMP_ENOTFOUND"},
    {"ensure_memory", "SMP_EAGAIN", "SMP_ENOTFOUND"},
    /* the last readable copy stays */
    {"release_memory", "SMP_ESTATE", "SMP_ENOTFOUND"},
    /* no append before the replay */
    {"remove_object", "SMP_ESTATE", "SMP_ENOTFOUND"},
    {"memory_usage", NULL, "0"},
    /* the version the probe reads first is already the loaded store's */
    {"objects_version", "same", "same"},
    /* read leases are volatile: none during a load */
    {"object_read_lease_end", "0", "0"},
    /* as objects_version */
    {"objects_loss_version", "same", "same"},
};

#define N_TOUCHING (sizeof(members) / sizeof(members[0]))

/* -- files ------------------------------------------------------------------ */

/* The path of the one snapshot in data/snapshots. */
static void only_snapshot(const hx_master *m, char *path, size_t cap)
{
    char dir[512];
    struct dirent **names = NULL;
    int found = 0;
    snprintf(dir, sizeof(dir), "%s/data/snapshots", m->dir);
    int n = scandir(dir, &names, NULL, alphasort);
    assert_true(n >= 0);
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(names[i]->d_name);
        if (nl > 5 && strcmp(names[i]->d_name + nl - 5, ".snap") == 0) {
            snprintf(path, cap, "%s/%s", dir, names[i]->d_name);
            found++;
        }
        free(names[i]);
    }
    free(names);
    assert_int_equal(found, 1);
}

/* Rewrite the snapshot with the body of its host_objects section replaced
 * by bytes that are checksummed like any section but do not decode (a field
 * of wire type 7, which protobuf does not have): the file passes every check
 * of snapshot.c and only the objects' load refuses it. */
static void break_objects_section(const hx_master *m)
{
    static const uint8_t garbage[] = {0x0f, 0xff, 0xff, 0xff, 0xff};
    char path[1024], dir[512], err[512];
    snap_image *img = NULL;
    only_snapshot(m, path, sizeof(path));
    if (snap_load_file(path, &img, err, sizeof(err)) != SMP_OK) fail_msg("%s", err);
    snap_builder *b = snap_builder_new(snap_image_last_seq(img));
    assert_non_null(b);
    int replaced = 0;
    for (size_t i = 0; i < snap_image_count(img); i++) {
        const snap_section *s = snap_image_section_at(img, i);
        int objects = strcmp(s->name, "host_objects") == 0;
        replaced += objects;
        assert_int_equal(snap_builder_add_raw(b, s->name, s->encver, objects ? garbage : s->data,
                                              objects ? sizeof(garbage) : s->len),
                         SMP_OK);
    }
    assert_int_equal(replaced, 1);
    snap_image_free(img);
    assert_int_equal(unlink(path), 0);
    snprintf(dir, sizeof(dir), "%s/data/snapshots", m->dir);
    assert_int_equal(snap_write_file(b, dir, 8, NULL, 0), SMP_OK);
    snap_builder_free(b);
}

/* -- the master ---------------------------------------------------------------- */

/* The probe alone (no weight plugin), refusing its section when fail_load,
 * calling member first before any other (NULL: none named). */
static void configure_first(hx_master *m, int fail_load, const char *first)
{
    char extra[1024], first_line[128] = "";
    if (first != NULL) snprintf(first_line, sizeof(first_line), "      first: \"%s\"\n", first);
    snprintf(extra, sizeof(extra),
             "plugins:\n"
             "  - path: \"%s\"\n"
             "    config:\n"
             "      group: \"probe\"\n"
             "      fail_load: %s\n"
             "%s",
             PROBE_PATH, fail_load ? "true" : "false", first_line);
    assert_int_equal(hx_reconfigure(m, extra), 0);
}

static void configure(hx_master *m, int fail_load)
{
    configure_first(m, fail_load, NULL);
}

/* MEMBERS objects in group "probe" and OTHERS outside it, then a snapshot
 * (the only one), then a clean stop. */
static void fill_and_snapshot(hx_master *m)
{
    char key[64];
    uint64_t seq = 0;
    kvc *c = hx_client(m);
    assert_non_null(c);
    for (int i = 0; i < MEMBERS; i++) {
        snprintf(key, sizeof(key), "probe/member/%04d", i);
        assert_int_equal(
            kvc_put_bytes(c, key, CONTENT, strlen(CONTENT), SMP_DATA_KV, "probe", 0, NULL), 0);
    }
    for (int i = 0; i < OTHERS; i++) {
        snprintf(key, sizeof(key), "other/%04d", i);
        assert_int_equal(
            kvc_put_bytes(c, key, CONTENT, strlen(CONTENT), SMP_DATA_KV, NULL, 0, NULL), 0);
    }
    assert_int_equal(kvc_snapshot(c, &seq), 0);
    assert_true(seq > 0);
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);
}

/* The reply of the probe's method (PROBE_SEEN: what it saw at its section
 * load, "" before any; PROBE_MEMBERS: the members it calls). */
static void probe_ask(const hx_master *m, uint32_t method, char *out, size_t cap)
{
    char err[256];
    rpcc_conn *r = NULL;
    rpcc_options opt = {.timeout_ms = 10000};
    int st = -1;
    uint8_t *body = NULL;
    size_t len = 0;
    if (rpcc_connect(m->socket, &opt, &r, err, sizeof(err)) != 0) fail_msg("%s", err);
    assert_int_equal(rpcc_call(r, PROBE_SERVICE, method, NULL, 0, &st, &body, &len, NULL), 0);
    assert_int_equal(st, 0);
    snprintf(out, cap, "%.*s", (int)len, (const char *)body);
    free(body);
    rpcc_close(r);
}

/* What the probe must have seen: every member classified, first called
 * first, each member's answer on the snapshot (loaded) or an empty store,
 * and the whole group. */
static void expected(char *out, size_t cap, const char *first, int loaded, double used)
{
    size_t n = (size_t)snprintf(out, cap, "uncovered=none first=%s", first ? first : "none");
    for (size_t i = 0; i < N_TOUCHING; i++) {
        const char *a = loaded ? members[i].loaded : members[i].empty;
        if (a != NULL) n += (size_t)snprintf(out + n, cap - n, " %s=%s", members[i].name, a);
        else n += (size_t)snprintf(out + n, cap - n, " %s=%.0f", members[i].name, used);
    }
    if (loaded)
        snprintf(out + n, cap - n, " count=%d listed=%d found=%d used=%.0f", MEMBERS, MEMBERS,
                 MEMBERS, used);
    else
        snprintf(out + n, cap - n, " count=0 listed=0 found=0 used=0");
}

/* PROBE_KEY is there, and the master holds the whole snapshot: MEMBERS
 * members and OTHERS others, nothing removed by the probe's writes. */
static void nothing_changed(hx_master *m)
{
    char **keys = NULL, *next = NULL;
    size_t n = 0;
    int exists = 0;
    kvc *c = hx_client(m);
    assert_non_null(c);
    assert_int_equal(kvc_exists(c, PROBE_KEY, &exists), 0);
    assert_int_equal(exists, 1);
    assert_int_equal(kvc_list(c, "", NULL, 1000, &keys, &n, &next), 0);
    assert_int_equal(n, MEMBERS + OTHERS);
    kvc_list_free(keys, n, next);
    kvc_close(c);
}

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

/* -- tests ------------------------------------------------------------------------ */

/* The members the probe calls are those this file's table expects, in its
 * order: a member added to either side alone fails here. */
static void test_the_probe_calls_every_member_the_table_expects(void **state)
{
    hx_master *m = *state;
    char got[1024], want[1024] = "";
    size_t n = 0;
    for (size_t i = 0; i < N_TOUCHING; i++)
        n += (size_t)snprintf(want + n, sizeof(want) - n, "%s%s", i ? " " : "", members[i].name);
    assert_int_equal(hx_init(m, "parallel-load-members", NULL), 0);
    configure(m, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    probe_ask(m, PROBE_MEMBERS, got, sizeof(got));
    assert_string_equal(got, want);
    assert_int_equal(hx_stop(m), 0);
}

/* Each member that touches objects, called first thing in the probe's
 * section load while the objects section is loading on its own thread,
 * waits for it and answers from the whole snapshot; so does every member
 * after it, and the group holds all 300 members (and only them), each found
 * again, using the memory the master reports once it serves. The writes
 * among them change nothing. On a fresh start each answers as on an empty
 * store. */
static void test_a_plugin_asking_during_its_load_sees_every_object(void **state)
{
    hx_master *m = *state;
    char seen[2048], want[2048];
    assert_int_equal(hx_init(m, "parallel-load", NULL), 0);
    configure(m, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    probe_ask(m, PROBE_SEEN, seen, sizeof(seen));
    expected(want, sizeof(want), NULL, 0, 0);
    assert_string_equal(seen, want); /* a fresh start */
    fill_and_snapshot(m);

    for (size_t round = 0; round <= N_TOUCHING; round++) {
        const char *first = round < N_TOUCHING ? members[round].name : NULL;
        configure_first(m, 0, first);
        assert_int_equal(hx_start(m, START_MS), 0);
        probe_ask(m, PROBE_SEEN, seen, sizeof(seen));
        double used = hx_metric(m, "store_memory_used_bytes");
        expected(want, sizeof(want), first, 1, used);
        if (strcmp(seen, want) != 0) {
            hx_print_log(m);
            fail_msg("restart with %s first: the probe saw \"%s\", the master holds \"%s\"",
                     first ? first : "no member", seen, want);
        }
        assert_true(used >= (double)MEMBERS * strlen(CONTENT));
        nothing_changed(m);
        assert_int_equal(hx_stop(m), 0);
    }
}

/* The objects section is refused while the probe loads its own: the start
 * is refused naming the objects section, and nothing on disk changed. */
static void test_a_refused_objects_section_refuses_the_start_naming_it(void **state)
{
    hx_master *m = *state;
    assert_int_equal(hx_init(m, "parallel-load-objects", NULL), 0);
    configure(m, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    fill_and_snapshot(m);
    break_objects_section(m);
    assert_true(hx_start_refused(m, START_MS, "section 'host_objects' does not load", NULL,
                                 "was refused by"));
}

/* The probe refuses its section while the objects load beside it: the start
 * is refused naming the probe's section, and nothing on disk changed. */
static void test_a_refused_plugin_section_refuses_the_start_naming_it(void **state)
{
    hx_master *m = *state;
    assert_int_equal(hx_init(m, "parallel-load-plugin", NULL), 0);
    configure(m, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    fill_and_snapshot(m);
    configure(m, 1);
    assert_true(hx_start_refused(m, START_MS,
                                 "section 'objects_probe' was refused by objects_probe: SMP_EIO",
                                 NULL, "does not load"));
}

/* Both sides refuse: the objects section is the cause named (it is what a
 * start that loaded the objects first stopped at). */
static void test_both_refused_name_the_objects_section(void **state)
{
    hx_master *m = *state;
    assert_int_equal(hx_init(m, "parallel-load-both", NULL), 0);
    configure(m, 0);
    assert_int_equal(hx_start(m, START_MS), 0);
    fill_and_snapshot(m);
    break_objects_section(m);
    configure(m, 1);
    assert_true(hx_start_refused(m, START_MS, "section 'host_objects' does not load", NULL,
                                 "was refused by"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_the_probe_calls_every_member_the_table_expects, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_plugin_asking_during_its_load_sees_every_object,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_refused_objects_section_refuses_the_start_naming_it,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_refused_plugin_section_refuses_the_start_naming_it,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_both_refused_name_the_objects_section, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
