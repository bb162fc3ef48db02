/* test_node_inventory.c -- a node's cold-file inventory too large for one
 * message registers in pages, and bad pages or registrations are refused.
 *
 * A master without its embedded node; node-a registers over the Unix socket
 * with an empty cold directory. For the paged case the test fills node-b's
 * cold directory (a directory in /dev/shm, linked from the test's own, so
 * that hundreds of persists cost no disk syncs) with cold files whose keys
 * are long, more than NODE_INVENTORY_PAGE_BYTES of them; the master knows
 * none of them, so it deletes every one it hears of: an empty directory
 * shows that every page arrived. The refusals are raw node-service calls:
 * each gets its clear error and registers nothing. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "node_cold.h"
#include "node_rpc.pb-c.h"
#include "node_runtime.h"
#include "rpc_client.h"

#define NODE_SERVICE 3
#define SEGMENT (8ull << 20)
#define KEY_BYTES 900
#define PAGED_FILES 700 /* about 1 KiB each: three pages of 256 KiB */

typedef struct fx {
    hx_master m;
    hx_node a, b;
    char shm_cold[128]; /* node-b's cold files ("" when not made) */
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(hx_init(&f->m, "inventory",
                             "node:\n  embedded: false\n  timeout_ms: 2000\n  poll_ms: 50\n"),
                     0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    hx_node_kill(&f->a);
    hx_node_kill(&f->b);
    if (f->shm_cold[0] != '\0') hx_remove_dir(f->shm_cold);
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

/* How many .cold files dir holds. */
static int cold_files(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len > strlen(COLD_SUFFIX) && strcmp(e->d_name + len - strlen(COLD_SUFFIX), COLD_SUFFIX) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* files of about KEY_BYTES each need at least three pages. */
static void assert_inventory_pages(int files)
{
    /* each entry: key, 64-hex name + ".cold", length, sha256, tags */
    size_t entry = KEY_BYTES + 69 + 32 + 16;
    assert_true((size_t)files * entry > 2 * (size_t)NODE_INVENTORY_PAGE_BYTES);
}

/* Wait until dir holds no cold file (the master deleted each one). */
static int wait_empty(const char *dir, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 50) {
        if (cold_files(dir) == 0) return 0;
        usleep(50 * 1000);
    }
    return -1;
}

/* A node whose inventory needs pages: it sends them, registers naming the
 * session, and the master reconciles every file of every page (all of them
 * orphans: each is deleted). */
static void test_large_inventory_registers_in_pages(void **state)
{
    fx *f = *state;
    char link[400];
    snprintf(f->shm_cold, sizeof(f->shm_cold), "/dev/shm/wm-inventory-%d", (int)getpid());
    hx_remove_dir(f->shm_cold);
    assert_int_equal(mkdir(f->shm_cold, 0700), 0);
    assert_int_equal(hx_own_dir(f->shm_cold), 0);
    snprintf(link, sizeof(link), "%s/cold-node-b", f->m.dir);
    assert_int_equal(symlink(f->shm_cold, link), 0);
    assert_int_equal(hx_cold_fill(f->shm_cold, "orphan", PAGED_FILES, KEY_BYTES), 0);
    assert_int_equal(cold_files(f->shm_cold), PAGED_FILES);
    assert_inventory_pages(PAGED_FILES);

    assert_int_equal(hx_node_start(&f->m, &f->b, "node-b", SEGMENT), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 20000), 0);
    char want[160];
    snprintf(want, sizeof(want), "inventory of %d cold files sent in 3 pages", PAGED_FILES);
    if (!hx_file_contains(f->b.log, want)) fail_msg("node-b's log lacks: %s", want);
    snprintf(want, sizeof(want), "%d cold files in 3 pages)", PAGED_FILES);
    assert_true(hx_log_contains(&f->m, want));
    if (wait_empty(f->shm_cold, 60000) != 0)
        fail_msg("%d cold files left: the master did not hear of them", cold_files(f->shm_cold));
    /* one summary line a page naming its first files, not a line a file */
    assert_true(hx_log_contains(&f->m, "belong to no replica; deleting them"));
    assert_true(hx_log_contains(&f->m, ".cold (orphan/")); /* a file by name and key */

    /* A node with a small inventory still registers in one message. */
    assert_false(hx_file_contains(f->a.log, "sent in"));
}

/* -- refusals --------------------------------------------------------------- */

static rpcc_conn *node_conn(const hx_master *m)
{
    rpcc_conn *c = NULL;
    char err[256];
    if (rpcc_connect(m->socket, NULL, &c, err, sizeof(err)) != 0) fail_msg("connect: %s", err);
    return c;
}

/* Call method with msg's encoding; the status, and the error in why. */
static int node_call(rpcc_conn *c, uint32_t method, const ProtobufCMessage *msg, char *why,
                     size_t cap)
{
    size_t len = msg != NULL ? protobuf_c_message_get_packed_size(msg) : 3;
    uint8_t *body = malloc(len + 1);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    char *err = NULL;
    int status = 0;
    assert_non_null(body);
    if (msg != NULL)
        protobuf_c_message_pack(msg, body);
    else
        memcpy(body, "\xff\xff\xff", 3); /* does not decode */
    assert_int_equal(rpcc_call(c, NODE_SERVICE, method, body, len, &status, &resp, &rlen, &err), 0);
    snprintf(why, cap, "%s", err ? err : "");
    free(err);
    free(resp);
    free(body);
    return status;
}

static InventoryFile *file_of(InventoryFile *f, char *key, char *name, uint8_t *sha, int i)
{
    inventory_file__init(f);
    snprintf(key, 32, "bad/%d", i);
    snprintf(name, 80, "%064d.cold", i);
    memset(sha, i, 32);
    f->key = key;
    f->name = name;
    f->length = 64;
    f->sha256.data = sha;
    f->sha256.len = 32;
    return f;
}

static void registration(NodeRegisterRequest *r, const char *id, uint8_t *secret)
{
    node_register_request__init(r);
    r->node_id = (char *)id;
    r->segment_id = (char *)id;
    r->data_addr = "127.0.0.1:1";
    r->segment_path = "/nonexistent";
    r->segment_bytes = SEGMENT;
    r->cold_dir = "/nonexistent";
    memset(secret, 7, 32);
    r->ticket_secret.data = secret;
    r->ticket_secret.len = 32;
}

static void assert_nodes_up(const hx_master *m, unsigned want)
{
    kvc *k = hx_client(m);
    kvc_status st;
    assert_non_null(k);
    assert_int_equal(kvc_status_get(k, &st), 0);
    assert_int_equal(st.nodes, want);
    assert_int_equal(st.segments, 1); /* node-a's: nothing mounted for "ghost" */
    kvc_close(k);
}

/* Pages and registrations that do not add up: each refused naming why, no
 * node registered, no segment mounted; then a whole session registers. */
static void test_bad_pages_and_registrations_are_refused(void **state)
{
    fx *f = *state;
    rpcc_conn *c = node_conn(&f->m);
    char why[512], keys[3][32], names[3][80];
    uint8_t shas[3][32], secret[32];
    InventoryFile files[3], *fp[3];
    for (int i = 0; i < 3; i++) fp[i] = file_of(&files[i], keys[i], names[i], shas[i], i);

    /* a body that does not decode */
    assert_int_equal(node_call(c, NODE_METHOD__NODE_INVENTORY, NULL, why, sizeof(why)), SMP_EPROTO);
    assert_true(hx_says(why, "does not decode as NodeInventoryRequest"));

    NodeInventoryRequest page = NODE_INVENTORY_REQUEST__INIT;
    page.node_id = "ghost";
    page.cold_files = fp;
    page.n_cold_files = 2;
    assert_int_equal(node_call(c, NODE_METHOD__NODE_INVENTORY, &page.base, why, sizeof(why)),
                     SMP_EINVAL);
    assert_true(hx_says(why, "names no session (0)"));
    page.node_id = "";
    page.session = 9;
    assert_int_equal(node_call(c, NODE_METHOD__NODE_INVENTORY, &page.base, why, sizeof(why)),
                     SMP_EINVAL);
    assert_true(hx_says(why, "names no node"));

    NodeRegisterRequest reg;
    registration(&reg, "ghost", secret);
    /* a session no page came for */
    reg.inventory_session = 0x1234;
    reg.inventory_files = 5;
    assert_int_equal(node_call(c, NODE_METHOD__NODE_REGISTER, &reg.base, why, sizeof(why)),
                     SMP_ESTATE);
    assert_true(hx_says(why, "inventory of 5 cold files in session 0000000000001234, but 0 of "
                             "them arrived"));
    /* a session and files in the registration too */
    reg.cold_files = fp;
    reg.n_cold_files = 1;
    assert_int_equal(node_call(c, NODE_METHOD__NODE_REGISTER, &reg.base, why, sizeof(why)),
                     SMP_EINVAL);
    assert_true(hx_says(why, "carries 1 cold files too"));
    reg.cold_files = NULL;
    reg.n_cold_files = 0;
    /* a count other than what arrived: refused, and the session dropped */
    page.node_id = "ghost";
    page.session = 0x1234;
    assert_int_equal(node_call(c, NODE_METHOD__NODE_INVENTORY, &page.base, why, sizeof(why)), 0);
    assert_int_equal(node_call(c, NODE_METHOD__NODE_REGISTER, &reg.base, why, sizeof(why)),
                     SMP_ESTATE);
    assert_true(hx_says(why, "but 2 of them arrived"));
    reg.inventory_files = 2;
    assert_int_equal(node_call(c, NODE_METHOD__NODE_REGISTER, &reg.base, why, sizeof(why)),
                     SMP_ESTATE);
    assert_true(hx_says(why, "but 0 of them arrived"));
    /* pages of another session than the one registered */
    page.session = 0x99;
    assert_int_equal(node_call(c, NODE_METHOD__NODE_INVENTORY, &page.base, why, sizeof(why)), 0);
    reg.inventory_session = 0x1234;
    assert_int_equal(node_call(c, NODE_METHOD__NODE_REGISTER, &reg.base, why, sizeof(why)),
                     SMP_ESTATE);
    assert_true(hx_says(why, "pages of another session are held"));
    assert_nodes_up(&f->m, 1);

    /* a new session replaces the old one's pages, and two pages add up */
    page.session = 0x77;
    page.n_cold_files = 1;
    assert_int_equal(node_call(c, NODE_METHOD__NODE_INVENTORY, &page.base, why, sizeof(why)), 0);
    page.cold_files = fp + 1;
    page.n_cold_files = 2;
    assert_int_equal(node_call(c, NODE_METHOD__NODE_INVENTORY, &page.base, why, sizeof(why)), 0);
    reg.inventory_session = 0x77;
    reg.inventory_files = 3;
    int rc = node_call(c, NODE_METHOD__NODE_REGISTER, &reg.base, why, sizeof(why));
    if (rc != 0) fail_msg("register: %d %s", rc, why);
    assert_true(hx_log_contains(&f->m, "node ghost up (data 127.0.0.1:1, segment /nonexistent, "
                                       "3 cold files in 2 pages)"));
    rpcc_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_large_inventory_registers_in_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_pages_and_registrations_are_refused, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
