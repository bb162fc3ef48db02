/* test_first_start.c -- the first start of a master with its embedded node:
 * a put that arrives before the node registered waits for it.
 *
 * A master that restarts knows its nodes from its state and holds the
 * calls that need one until they register (test_nodes). On the very first
 * start the state knows no node, but the master knows its embedded node
 * is coming: it registers a few milliseconds after the master serves. To
 * hold that window open for the test, the embedded node's cold directory
 * (in /dev/shm, linked from the test's, so that the files cost no disk
 * syncs) holds thousands of files of long keys no master knows: the node
 * reads and sends that inventory before it registers. The test asks the
 * master's status the moment it serves (no node up yet), then puts an
 * object. Before, the put was refused "no node is up to place it on"; now
 * it is held and placed once the node registered. The directories that
 * first start makes for its node are the node's alone (0700). */
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

#include "harness.h"
#include "kv_client.h"

#define FILLER_FILES 10000
#define KEY_BYTES 900
#define OBJ_BYTES 4096

typedef struct fx {
    hx_master m;
    char shm_cold[128]; /* the embedded node's cold files */
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    hx_cleanup(&f->m);
    if (f->shm_cold[0] != '\0') hx_remove_dir(f->shm_cold);
    free(f);
    return 0;
}

/* The first start, its embedded node slow to register: a put sent while
 * no node is up is held (store_node_wait_calls_total) and placed once the
 * node registered; it reads back. */
static void test_a_put_at_the_first_start_waits_for_the_embedded_node(void **state)
{
    fx *f = *state;
    char cfg[1024], link[400], err[256];
    uint8_t data[OBJ_BYTES], back[OBJ_BYTES];
    uint64_t len = 0;
    kvc *c = NULL;
    kvc_status st;

    assert_int_equal(hx_init(&f->m, "firststart", NULL), 0);
    snprintf(f->shm_cold, sizeof(f->shm_cold), "/dev/shm/wm-firststart-%d", (int)getpid());
    hx_remove_dir(f->shm_cold);
    assert_int_equal(hx_own_new_dir(f->shm_cold), 0);
    snprintf(link, sizeof(link), "%s/cold-embedded", f->m.dir);
    assert_int_equal(symlink(f->shm_cold, link), 0);
    assert_int_equal(hx_cold_fill(f->shm_cold, "filler", FILLER_FILES, KEY_BYTES), 0);
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: 16777216\n"
             "  cold_dir: \"%s\"\n",
             f->m.dir, link);
    assert_int_equal(hx_reconfigure(&f->m, cfg), 0);
    f->m.expect_nodes = 0; /* serving is enough: do not wait for the node */
    assert_int_equal(hx_start(&f->m, 20000), 0);

    assert_int_equal(kvc_connect(f->m.socket, 30000, &c, err, sizeof(err)), 0);
    assert_int_equal(kvc_status_get(c, &st), 0);
    if (st.nodes != 0)
        fail_msg("the embedded node registered before the put: the window this test needs "
                 "was not open (%u node(s) up)", st.nodes);
    for (size_t i = 0; i < sizeof(data); i++) data[i] = (uint8_t)(i * 7 + 1);
    if (kvc_put_bytes(c, "first/object", data, sizeof(data), SMP_DATA_KV, "", 0, NULL) != 0)
        fail_msg("the put at the first start was refused: %s", kvc_error(c));
    assert_int_equal(kvc_status_get(c, &st), 0);
    assert_int_equal(st.nodes, 1);
    assert_int_equal(kvc_get_into(c, "first/object", back, sizeof(back), &len, 1), 0);
    assert_int_equal(len, sizeof(data));
    assert_memory_equal(back, data, sizeof(data));
    kvc_close(c);
    if (hx_metric(&f->m, "store_node_wait_calls_total") < 1) {
        hx_print_log(&f->m);
        fail_msg("the put was not held for the node");
    }
    assert_int_equal(hx_stop(&f->m), 0);
}

/* The first start without an embedded node and before any store_node
 * registered: nothing is waited for -- the log says no node holds a
 * segment (before, it said every node holding one had registered) -- and
 * a put is refused at once, naming the cause. */
static void test_a_first_start_without_nodes_waits_for_none(void **state)
{
    fx *f = *state;
    char err[256];
    kvc *c = NULL;
    assert_int_equal(hx_init(&f->m, "firstnone", NULL), 0);
    assert_int_equal(hx_reconfigure(&f->m, "node:\n  embedded: false\n"), 0);
    f->m.expect_nodes = 0;
    assert_int_equal(hx_start(&f->m, 20000), 0);
    for (int i = 0; !hx_log_contains(&f->m, "reconcile ticks start"); i++) {
        if (i > 1000) fail_msg("the ticks did not start");
        usleep(10000);
    }
    if (!hx_log_contains(&f->m, "no node holds a segment yet (none to wait for); reconcile ticks start") ||
        hx_log_contains(&f->m, "every node holding a segment has registered")) {
        hx_print_log(&f->m);
        fail_msg("the log does not say that no node was waited for");
    }
    assert_int_equal(kvc_connect(f->m.socket, 30000, &c, err, sizeof(err)), 0);
    assert_int_equal(kvc_put_bytes(c, "first/none", "x", 1, SMP_DATA_KV, "", 0, NULL), SMP_EAGAIN);
    assert_true(hx_says(kvc_error(c), "no node is up to place it on"));
    assert_int_equal(hx_metric(&f->m, "store_node_wait_calls_total"), 0);
    kvc_close(c);
    assert_int_equal(hx_stop(&f->m), 0);
}

/* The directories the first start makes for its embedded node are the
 * node's alone, as a store_node's are: the segment directory and the cold
 * directory 0700 (before, the master made them 0755 and anyone could list
 * them), the segment file 0600 in it. */
static void test_the_embedded_node_s_directories_are_0700(void **state)
{
    fx *f = *state;
    char path[600];
    struct stat st;
    assert_int_equal(hx_init(&f->m, "firstmode", NULL), 0);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 20000), 0);
    snprintf(path, sizeof(path), "%s/shm", f->m.dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0700);
    snprintf(path, sizeof(path), "%s/shm/embedded.seg", f->m.dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    snprintf(path, sizeof(path), "%s/data/cold", f->m.dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0700);
    assert_int_equal(hx_stop(&f->m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_put_at_the_first_start_waits_for_the_embedded_node,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_first_start_without_nodes_waits_for_none, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_embedded_node_s_directories_are_0700, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
