/* test_fsck_pages.c -- `weightctl fsck` of a cold tier too large for one
 * SCAN answer: the node answers in pages, the master sees every file, and
 * pages that do not fit the protocol are refused with nothing changed.
 *
 * A master without its embedded node; node-a's cold directory is a
 * directory in /dev/shm linked from the test's own (hundreds of persists
 * cost no disk syncs). Once node-a registered, the test fills it with cold
 * files of long keys no master knows, more than two pages of them, and
 * corrupts the header of the one whose name sorts in the middle: fsck
 * reports every file (the last name included) as an orphan, the corrupt one
 * as corrupt, changes nothing, and --repair deletes them all. The refusals
 * come from "ghost", a node played by the test over the node service: it
 * answers the master's SCAN pages wrongly, and each fsck --repair reports
 * the cause for ghost and sends it no repair task. The background fsck
 * owes node-a, down at a run's start or killed in its middle, the rest of
 * its check, and runs it as soon as node-a is back. */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "node_cold.h"
#include "node_rpc.pb-c.h"
#include "rpc_client.h"
#include "weight_model.h"

#define NODE_SERVICE 3
#define SEGMENT (8ull << 20)
#define KEY_BYTES 900
#define FILES 700            /* about 1 KiB each: three pages of 256 KiB */
#define PAGE_BYTES (256u << 10) /* master_fsck.c's FSCK_PAGE_BYTES */
#define OUT_CAP (4u << 20)

typedef struct fx {
    hx_master m;
    hx_node a;
    char shm_cold[128];
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    char link[400];
    assert_non_null(f);
    assert_int_equal(hx_init(&f->m, "fsckpages",
                             "node:\n  embedded: false\n  timeout_ms: 3000\n  poll_ms: 50\n"),
                     0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    snprintf(f->shm_cold, sizeof(f->shm_cold), "/dev/shm/wm-fsckpages-%d", (int)getpid());
    hx_remove_dir(f->shm_cold);
    assert_int_equal(mkdir(f->shm_cold, 0700), 0);
    assert_int_equal(hx_own_dir(f->shm_cold), 0);
    snprintf(link, sizeof(link), "%s/cold-node-a", f->m.dir);
    assert_int_equal(symlink(f->shm_cold, link), 0);
    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    hx_node_kill(&f->a);
    hx_remove_dir(f->shm_cold);
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .cold names of dir, sorted (*n of them; free each and the array). */
static char **cold_names(const char *dir, size_t *n)
{
    size_t cap = 1024;
    char **v = malloc(cap * sizeof(*v));
    DIR *d = opendir(dir);
    assert_non_null(v);
    assert_non_null(d);
    *n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len <= strlen(COLD_SUFFIX) || strcmp(e->d_name + len - strlen(COLD_SUFFIX), COLD_SUFFIX) != 0)
            continue;
        if (*n == cap) assert_non_null(v = realloc(v, (cap *= 2) * sizeof(*v)));
        assert_non_null(v[(*n)++] = strdup(e->d_name));
    }
    closedir(d);
    qsort(v, *n, sizeof(*v), cmp_str);
    return v;
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* How many .cold files dir holds. */
static size_t cold_count(const char *dir)
{
    size_t n;
    char **v = cold_names(dir, &n);
    free_names(v, n);
    return n;
}

static size_t count(const char *text, const char *needle)
{
    size_t k = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) k++;
    return k;
}

/* A node's cold tier of three pages: every file is seen (the first and
 * last names, the corrupt one in the middle), nothing changes read-only,
 * --repair deletes each one, and a second fsck is clean. */
static void test_fsck_of_a_large_cold_tier_reads_every_page(void **state)
{
    fx *f = *state;
    char *out = malloc(OUT_CAP), want[200], path[400];
    size_t n;
    assert_non_null(out);
    assert_int_equal(hx_cold_fill(f->shm_cold, "orphan", FILES, KEY_BYTES), 0);
    char **names = cold_names(f->shm_cold, &n);
    assert_int_equal(n, FILES);
    /* each entry: key, name, length, sha256, tags: more than two pages */
    assert_true((size_t)FILES * (KEY_BYTES + 69 + 32 + 8) > 2 * (size_t)PAGE_BYTES);
    /* the header of the middle name no longer matches its checksum */
    const char *corrupt = names[FILES / 2];
    snprintf(path, sizeof(path), "%s/%s", f->shm_cold, corrupt);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "X", 1, 100), 1);
    close(fd);

    assert_int_equal(wx_weightctl(&f->m, out, OUT_CAP, "--json fsck"), 1);
    snprintf(want, sizeof(want), "\"cold_files\":%d,", FILES);
    if (strstr(out, want) == NULL) fail_msg("fsck did not see %d files: %.2000s", FILES, out);
    snprintf(want, sizeof(want), "\"orphans\":%d,\"corrupt_replicas\":0,\"objects_without_replica\":0,", FILES);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, names[0]));
    assert_non_null(strstr(out, names[FILES - 1])); /* the last page's last file */
    assert_int_equal(count(out, "\"corrupt\":true"), 1);
    snprintf(want, sizeof(want), "{\"name\":\"%s\",\"key\":\"\",", corrupt);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof(want), "node node-a: %d cold files in 3 scan pages", FILES);
    assert_true(hx_log_contains(&f->m, want));
    assert_int_equal(cold_count(f->shm_cold), FILES); /* read-only */

    assert_int_equal(wx_weightctl(&f->m, out, OUT_CAP, "--json fsck --repair"), 0);
    snprintf(want, sizeof(want), "\"files_removed\":%d,", FILES);
    if (strstr(out, want) == NULL) fail_msg("fsck --repair: %.2000s", out);
    assert_int_equal(cold_count(f->shm_cold), 0);
    assert_int_equal(wx_weightctl(&f->m, out, OUT_CAP, "fsck"), 0);
    assert_non_null(strstr(out, "clean"));
    free_names(names, n);
    free(out);
}

/* A node that is nearly all orphans (a wiped master): the report counts
 * every orphan file but names only the first 10,000 (master_fsck.c's
 * FSCK_REPORT_FILES_MAX), in name order, so it stays far under the frame
 * limit; --repair deletes them all. */
static void test_a_report_names_the_first_10000_orphans(void **state)
{
    fx *f = *state;
    enum { MANY = 10050, LISTED = 10000 };
    char *out = malloc(OUT_CAP), want[200];
    size_t n;
    assert_non_null(out);
    assert_int_equal(hx_cold_fill(f->shm_cold, "orphan", MANY, 16), 0);
    char **names = cold_names(f->shm_cold, &n);
    assert_int_equal(n, MANY);

    assert_int_equal(wx_weightctl(&f->m, out, OUT_CAP, "--json fsck"), 1);
    snprintf(want, sizeof(want), "\"orphan_files_total\":%d,", MANY);
    if (strstr(out, want) == NULL) fail_msg("fsck: %.2000s", out);
    snprintf(want, sizeof(want), "\"orphans\":%d,\"corrupt_replicas\":0,\"objects_without_replica\":0,", MANY);
    assert_non_null(strstr(out, want));
    assert_int_equal(count(out, "{\"name\":"), LISTED);
    assert_non_null(strstr(out, names[0]));
    assert_non_null(strstr(out, names[LISTED - 1]));
    assert_null(strstr(out, names[LISTED])); /* the first one not named */
    assert_int_equal(wx_weightctl(&f->m, out, OUT_CAP, "fsck"), 1);
    snprintf(want, sizeof(want), "node node-a: %d cold files, %d bytes; %d orphaned\n", MANY,
             MANY * 64, MANY);
    if (strstr(out, want) == NULL) fail_msg("fsck text: %.600s", out);
    snprintf(want, sizeof(want), "  ... and %d more orphan cold files (a report names the first %d)\n",
             MANY - LISTED, LISTED);
    assert_non_null(strstr(out, want));
    assert_int_equal(cold_count(f->shm_cold), MANY); /* read-only */

    assert_int_equal(wx_weightctl(&f->m, out, OUT_CAP, "--json fsck --repair"), 0);
    snprintf(want, sizeof(want), "\"files_removed\":%d,", MANY);
    if (strstr(out, want) == NULL) fail_msg("fsck --repair: %.2000s", out);
    assert_int_equal(cold_count(f->shm_cold), 0);
    free_names(names, n);
    free(out);
}

/* -- the ghost node ------------------------------------------------------------ */

typedef enum bad_page {
    BAD_ORDER,    /* page 2's names out of order */
    BAD_AFTER,    /* page 1 answers the page after another name */
    BAD_SIZE,     /* page 1 larger than asked */
    BAD_OLD_NODE, /* page 2 from a node without pages */
    OLD_NODE,     /* a node from before pages: every file in its first answer (good) */
    NOT_DEEP,     /* a deep scan answered by a node that did not hash (before --deep) */
    DELETE_FAILS, /* a right page of two orphans, whose deletions the node fails */
    SILENT,       /* asked for its first page, the node stops polling */
} bad_page;

/* Strings and files a crafted page points to (freed with it). */
typedef struct page_buf {
    TaskResult r;
    InventoryFile files[300], *fp[300];
    char names[300][80];
    char after[400];            /* the task's (the poll answer that had it is freed) */
    char *keys;
    uint8_t sha[32];
} page_buf;

/* A page answering task t: files named by the numbers first..first+n-1 (or
 * as given), after and page_bytes as t asked. */
static page_buf *page_new(const NodeTask *t, const int *nums, size_t n, size_t key_bytes, int more)
{
    page_buf *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    assert_true(n <= 300);
    assert_non_null(p->keys = calloc(n + 1, key_bytes + 1));
    task_result__init(&p->r);
    p->r.id = t->id;
    snprintf(p->after, sizeof(p->after), "%s", t->after);
    p->r.after = p->after;
    p->r.page_bytes = t->page_bytes;
    p->r.more = more;
    memset(p->sha, 1, sizeof(p->sha));
    for (size_t i = 0; i < n; i++) {
        InventoryFile *f = &p->files[i];
        char *key = p->keys + i * (key_bytes + 1);
        inventory_file__init(f);
        snprintf(p->names[i], sizeof(p->names[i]), "%064d.cold", nums[i]);
        memset(key, 'g', key_bytes);
        key[key_bytes] = '\0';
        f->name = p->names[i];
        f->key = key;
        f->length = 64;
        f->sha256.data = p->sha;
        f->sha256.len = 32;
        p->fp[i] = f;
    }
    p->r.files = p->fp;
    p->r.n_files = n;
    return p;
}

static void page_free(page_buf *p)
{
    if (p == NULL) return;
    free(p->keys);
    free(p);
}

/* The answer to page `page` (0: the first) of the fsck's scan for kind. */
static page_buf *bad_answer(bad_page kind, int page, const NodeTask *t)
{
    static const int first[] = {1, 2}, disorder[] = {5, 3};
    int many[300];
    for (int i = 0; i < 300; i++) many[i] = 10 + i;
    switch (kind) {
    case BAD_ORDER:
        return page == 0 ? page_new(t, first, 2, 16, 1) : page_new(t, disorder, 2, 16, 0);
    case BAD_AFTER: {
        page_buf *p = page_new(t, first, 2, 16, 0);
        p->r.after = "zzz";
        return p;
    }
    case BAD_SIZE:
        return page_new(t, many, 300, 1000, 0);
    case BAD_OLD_NODE: {
        page_buf *p = page == 0 ? page_new(t, first, 2, 16, 1) : page_new(t, disorder, 1, 16, 0);
        if (page > 0) {
            p->r.page_bytes = 0;
            p->r.after = "";
        }
        return p;
    }
    case NOT_DEEP: /* a right page, but TaskResult.deep unset */
    case DELETE_FAILS:
    case SILENT:      /* not asked: it answers nothing */
        return page_new(t, first, 2, 16, 0);
    case OLD_NODE: { /* names in no order, no cursor, no bound: as before pages */
        page_buf *p = page_new(t, disorder, 2, 16, 0);
        p->r.page_bytes = 0;
        p->r.after = "";
        return p;
    }
    }
    return NULL;
}

/* One poll of ghost carrying the answers in pages (n of them, freed); the
 * master's answer (to free). */
static NodePollResponse *ghost_poll(rpcc_conn *c, page_buf **pages, size_t n)
{
    NodePollRequest req = NODE_POLL_REQUEST__INIT;
    TaskResult *res[8];
    for (size_t i = 0; i < n; i++) res[i] = &pages[i]->r;
    req.node_id = "ghost";
    req.results = res;
    req.n_results = n;
    size_t len = node_poll_request__get_packed_size(&req);
    uint8_t *body = malloc(len + 1), *resp = NULL;
    size_t rlen = 0;
    char *err = NULL;
    int status = 0;
    assert_non_null(body);
    node_poll_request__pack(&req, body);
    assert_int_equal(rpcc_call(c, NODE_SERVICE, NODE_METHOD__NODE_POLL, body, len, &status, &resp,
                               &rlen, &err), 0);
    if (status != 0) fail_msg("ghost's poll: %d %s", status, err ? err : "");
    NodePollResponse *r = node_poll_response__unpack(NULL, rlen, resp);
    assert_non_null(r);
    assert_false(r->reregister);
    for (size_t i = 0; i < n; i++) page_free(pages[i]);
    free(body);
    free(resp);
    free(err);
    return r;
}

static void ghost_register(const hx_master *m, rpcc_conn *c)
{
    NodeRegisterRequest reg = NODE_REGISTER_REQUEST__INIT;
    uint8_t secret[32];
    reg.node_id = "ghost";
    reg.segment_id = "ghost";
    reg.data_addr = "127.0.0.1:1";
    reg.segment_path = "/nonexistent";
    reg.segment_bytes = SEGMENT;
    reg.cold_dir = "/nonexistent";
    memset(secret, 7, sizeof(secret));
    reg.ticket_secret.data = secret;
    reg.ticket_secret.len = sizeof(secret);
    size_t len = node_register_request__get_packed_size(&reg);
    uint8_t *body = malloc(len), *resp = NULL;
    size_t rlen = 0;
    char *err = NULL;
    int status = 0;
    assert_non_null(body);
    node_register_request__pack(&reg, body);
    assert_int_equal(rpcc_call(c, NODE_SERVICE, NODE_METHOD__NODE_REGISTER, body, len, &status,
                               &resp, &rlen, &err), 0);
    if (status != 0) fail_msg("ghost's registration: %d %s", status, err ? err : "");
    free(body);
    free(resp);
    free(err);
    assert_int_equal(hx_wait_nodes(m, 2, 10000), 0);
}

/* The answer of a node whose deletion of t's file fails (EACCES). */
static page_buf *delete_refused(const NodeTask *t)
{
    page_buf *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    task_result__init(&p->r);
    p->r.id = t->id;
    p->r.status = SMP_EIO;
    snprintf(p->after, sizeof(p->after), "delete %.300s: Permission denied", t->cold_name);
    p->r.error = p->after;
    return p;
}

/* Run weightctl's `fsck` with args (`--json` first with json) while ghost
 * answers its scan with the pages of kind; its output (to free). Ghost
 * fails the test on a task other than SCAN (a repair) -- but for
 * DELETE_FAILS, whose deletions it answers failed -- or on a page asked
 * after a refused one. The output ends with weightctl's "exit=N". */
static char *ghost_fsck_as(fx *f, rpcc_conn *c, bad_page kind, int json, const char *args)
{
    char outpath[400], cmd[1600];
    snprintf(outpath, sizeof(outpath), "%s/fsck-%d.json", f->m.dir, (int)kind);
    snprintf(cmd, sizeof(cmd), "%s/bin/weightctl --master %s %s fsck %s >%s 2>&1; echo exit=$? >>%s",
             BUILD_DIR, f->m.socket, json ? "--json" : "", args, outpath, outpath);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    page_buf *answers[8];
    size_t n_answers = 0;
    int page = 0, exited = 0, after_exit = 0, silent = 0;
    for (int i = 0; i < 2000 && after_exit < 10 && !silent; i++) {
        NodePollResponse *r = ghost_poll(c, answers, n_answers);
        n_answers = 0;
        for (size_t k = 0; k < r->n_tasks && !silent; k++) {
            const NodeTask *t = r->tasks[k];
            if (kind == SILENT && t->kind == TASK_KIND__TASK_SCAN && !t->segment_only) {
                silent = 1; /* no answer, no poll: the master marks it down */
                continue;
            }
            if (kind == DELETE_FAILS && t->kind == TASK_KIND__TASK_DELETE_COLD) {
                answers[n_answers++] = delete_refused(t);
                continue;
            }
            if (t->kind != TASK_KIND__TASK_SCAN)
                fail_msg("ghost was sent task kind %d after a refused page", (int)t->kind);
            if (t->segment_only) /* a registration's sweep: an empty page */
                answers[n_answers++] = page_new(t, NULL, 0, 0, 0);
            else if (page > 0 && kind != BAD_ORDER && kind != BAD_OLD_NODE)
                fail_msg("ghost was asked for page %d after a refused one", page + 1);
            else
                answers[n_answers++] = bad_answer(kind, page++, t);
        }
        node_poll_response__free_unpacked(r, NULL);
        int st;
        if (!exited && waitpid(pid, &st, WNOHANG) == pid) exited = 1;
        if (exited) after_exit++;
    }
    for (int i = 0; silent && !exited && i < 400; i++) { /* 20 s */
        if (waitpid(pid, NULL, WNOHANG) == pid) exited = 1;
        else usleep(50000);
    }
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("fsck did not end");
    }
    for (size_t k = 0; k < n_answers; k++) page_free(answers[k]);
    char *out = malloc(OUT_CAP);
    assert_non_null(out);
    FILE *fp = fopen(outpath, "r");
    assert_non_null(fp);
    size_t len = fread(out, 1, OUT_CAP - 1, fp);
    out[len] = '\0';
    fclose(fp);
    return out;
}

static char *ghost_fsck(fx *f, rpcc_conn *c, bad_page kind, const char *args)
{
    return ghost_fsck_as(f, c, kind, 1, args);
}

/* `fsck --repair` (and args) while ghost answers its scan with the bad
 * page of kind: the report names want for ghost, lists no orphan there,
 * removes nothing, and ghost gets no repair task (nor a page after the
 * refused one). */
static void bad_page_refused(fx *f, rpcc_conn *c, bad_page kind, const char *args, const char *want)
{
    char all[64];
    snprintf(all, sizeof(all), "--repair %s", args);
    char *out = ghost_fsck(f, c, kind, all);
    const char *ghost = strstr(out, "{\"node\":\"ghost\"");
    if (ghost == NULL || strstr(ghost, want) == NULL) fail_msg("want '%s' for ghost in: %s", want, out);
    assert_non_null(strstr(ghost, "\"orphan_files\":[]"));
    assert_non_null(strstr(ghost, "\"files_removed\":0,"));
    assert_true(hx_log_contains(&f->m, want));
    free(out);
}

/* Pages that do not answer what was asked -- or a deep scan answered by a
 * node that did not hash -- each refused naming the cause, and nothing is
 * repaired on the node. */
static void test_bad_scan_pages_are_refused(void **state)
{
    fx *f = *state;
    rpcc_conn *c = NULL;
    char err[256];
    if (rpcc_connect(f->m.socket, NULL, &c, err, sizeof(err)) != 0) fail_msg("connect: %s", err);
    ghost_register(&f->m, c);
    char want[300];
    snprintf(want, sizeof(want), "scan page 2: cold file '%064d.cold' does not sort after "
             "'%064d.cold' (names out of order)", 3, 5);
    bad_page_refused(f, c, BAD_ORDER, "", want);
    bad_page_refused(f, c, BAD_AFTER, "", "scan page 1 answers the page after 'zzz', not the one "
                                          "asked (after '')");
    bad_page_refused(f, c, BAD_SIZE, "", "more than the 262144 asked");
    bad_page_refused(f, c, BAD_OLD_NODE, "", "scan page 2 came from a node without scan pages");
    /* A deep check a node did not make is not taken for one. */
    bad_page_refused(f, c, NOT_DEEP, "--deep", "scan page 1: the node did not hash its cold files' "
                                               "data (a store_node from before fsck --deep?)");
    rpcc_close(c);
}

/* A node from before scan pages ignores the cursor and the bound and
 * answers the first page with every file, in no order: taken whole, as
 * before, its files judged (both orphans here). */
static void test_a_node_without_pages_answers_whole(void **state)
{
    fx *f = *state;
    rpcc_conn *c = NULL;
    char err[256], want[200];
    if (rpcc_connect(f->m.socket, NULL, &c, err, sizeof(err)) != 0) fail_msg("connect: %s", err);
    ghost_register(&f->m, c);
    char *out = ghost_fsck(f, c, OLD_NODE, "");
    const char *ghost = strstr(out, "{\"node\":\"ghost\"");
    if (ghost == NULL || strstr(ghost, "\"error\":\"\",\"in_repair\":false,\"cold_files\":2,") == NULL)
        fail_msg("ghost's whole answer: %s", out);
    for (int i = 3; i <= 5; i += 2) {
        snprintf(want, sizeof(want), "{\"name\":\"%064d.cold\"", i);
        assert_non_null(strstr(ghost, want));
    }
    free(out);
    rpcc_close(c);
}

/* Deletions the node fails in `fsck --repair` are reported as a repair
 * that did not go through -- "not repaired", the node's cause, exit 1 --
 * not as a node that could not be checked: the check found both orphans. */
static void test_a_failed_deletion_is_not_repaired_not_unchecked(void **state)
{
    fx *f = *state;
    rpcc_conn *c = NULL;
    char err[256], want[300];
    if (rpcc_connect(f->m.socket, NULL, &c, err, sizeof(err)) != 0) fail_msg("connect: %s", err);
    ghost_register(&f->m, c);
    char *out = ghost_fsck_as(f, c, DELETE_FAILS, 0, "--repair");
    const char *ghost = strstr(out, "node ghost: 2 cold files");
    snprintf(want, sizeof(want), "  not repaired: SMP_EIO: delete %064d.cold: Permission denied", 1);
    if (ghost == NULL || strstr(ghost, want) == NULL || strstr(out, "not checked") != NULL ||
        strstr(out, "\nrepaired:") != NULL || strstr(out, "\nexit=1\n") == NULL)
        fail_msg("fsck --repair said: %s", out);
    free(out);
    out = ghost_fsck(f, c, DELETE_FAILS, "--repair");
    ghost = strstr(out, "{\"node\":\"ghost\"");
    if (ghost == NULL || strstr(ghost, "\"in_repair\":true,\"cold_files\":2,") == NULL ||
        strstr(ghost, "\"files_removed\":0,") == NULL)
        fail_msg("fsck --repair --json said: %s", out);
    free(out);
    rpcc_close(c);
}

/* A node that stops answering in the middle of fsck (asked for its first
 * page, it stops polling) is marked down after node.timeout_ms and fsck
 * ends: the report says it was not checked because it stopped answering,
 * not a bare SMP_EIO, and exits 1. */
static void test_a_node_that_stops_answering_is_reported_so(void **state)
{
    fx *f = *state;
    rpcc_conn *c = NULL;
    char err[256];
    if (rpcc_connect(f->m.socket, NULL, &c, err, sizeof(err)) != 0) fail_msg("connect: %s", err);
    ghost_register(&f->m, c);
    char *out = ghost_fsck_as(f, c, SILENT, 0, "");
    const char *ghost = strstr(out, "node ghost: ");
    if (ghost == NULL ||
        strstr(ghost, "  not checked: SMP_EIO: the node stopped answering during the check (marked "
                      "down)") == NULL ||
        strstr(out, "\nexit=1\n") == NULL)
        fail_msg("fsck said: %s", out);
    free(out);
    rpcc_close(c);
}

/* How many times the master's log holds needle. */
static size_t log_count(fx *f, const char *needle)
{
    char *log = NULL;
    size_t n = 0;
    FILE *lf = fopen(f->m.log, "r");
    assert_non_null(lf);
    assert_true(getdelim(&log, &n, '\0', lf) >= 0);
    fclose(lf);
    size_t seen = count(log, needle);
    free(log);
    return seen;
}

/* Wait until the master's log holds needle k times (it says so, with the
 * log, when it does not). */
static void wait_log_count(fx *f, const char *needle, size_t k)
{
    for (int i = 0;; i++) {
        if (log_count(f, needle) >= k) return;
        if (i * 20 > 60000) {
            hx_print_log(&f->m);
            fail_msg("the log never said \"%s\" %zu time(s)", needle, k);
        }
        usleep(20000);
    }
}

#define OWED_TENSORS 400 /* of 4 KiB: two revisions are some 3 MiB of cold files */
static wx_tensor owed_model[OWED_TENSORS];
static char owed_names[OWED_TENSORS][16];

/* Restart the master with a background fsck due (fsck.last says 1970),
 * paced at 1 MiB/s. */
static void restart_with_a_run_due(fx *f, const char *last)
{
    assert_int_equal(hx_stop(&f->m), 0);
    FILE *fp = fopen(last, "w");
    assert_non_null(fp);
    fputs("1000\n", fp);
    fclose(fp);
    assert_int_equal(hx_reconfigure(&f->m, "node:\n  embedded: false\n  timeout_ms: 3000\n"
                                           "  poll_ms: 50\nfsck:\n  every_s: 86400\n"
                                           "  bytes_per_s: 1048576\n"),
                     0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
}

/* The background fsck owes a node that was down at its start, or went down
 * during its check, the rest of it: once the node is up again a run over
 * it alone goes on from where it stopped -- not at the next fsck.every_s
 * -- and fsck.last keeps what is owed across the master's restarts. */
static void test_the_background_fsck_checks_a_node_when_it_is_back(void **state)
{
    fx *f = *state;
    char last[400], text[8192];
    weight_identity a, b;
    for (size_t i = 0; i < OWED_TENSORS; i++) {
        snprintf(owed_names[i], sizeof(owed_names[i]), "t.%03zu", i);
        owed_model[i] = (wx_tensor){.name = owed_names[i], .shape = {16, 64}};
    }
    weight_store *s = wx_open_store(&f->m);
    assert_int_equal(weight_identity_set(&a, NULL, "llm", "owed", "a", 1), 0);
    assert_int_equal(weight_identity_set(&b, NULL, "llm", "owed", "b", 1), 0);
    wx_model_fill(owed_model, OWED_TENSORS, 3);
    wx_put_model(s, &a, owed_model, OWED_TENSORS);
    wx_migrate_and_wait(s, &a, WEIGHT_RES_COLD);
    wx_model_fill(owed_model, OWED_TENSORS, 5);
    wx_put_model(s, &b, owed_model, OWED_TENSORS);
    wx_migrate_and_wait(s, &b, WEIGHT_RES_COLD);
    weight_store_close(s);
    size_t files = cold_count(f->shm_cold);
    assert_true(files > 2 * OWED_TENSORS);
    snprintf(last, sizeof(last), "%s/data/fsck.last", f->m.dir);

    /* down at the start: owed from the first file */
    hx_node_kill(&f->a);
    restart_with_a_run_due(f, last);
    wait_log_count(f, "background fsck: ended: 0 nodes checked (0 ended in an error, 1 not up)", 1);
    if (!hx_log_contains(&f->m, "1 node(s) still owed their check, from where it stopped: each as "
                                "soon as it is up\n"))
        fail_msg("the end of the run does not say what it owes");
    hx_read_text(last, text, sizeof(text));
    if (strstr(text, "\nat node-a \n") == NULL) fail_msg("fsck.last: %s", text);
    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    wait_log_count(f, "background fsck: resumed: the 1 node(s) the last run still owes (those not "
                      "up wait), at 1048576 bytes/s each: node-a from the first file", 1);
    wait_log_count(f, "background fsck: ended: ", 2);
    if (hx_background_fsck_files(&f->m, 2) != files) {
        hx_print_log(&f->m);
        fail_msg("the node owed its check was read %llu files of %zu", hx_background_fsck_files(&f->m, 2),
                 files);
    }
    hx_read_text(last, text, sizeof(text));
    if (strchr(text, '\n') != text + strlen(text) - 1) fail_msg("fsck.last after: %s", text);

    /* down during its check: owed the files after its last page, across a
     * restart of the master */
    restart_with_a_run_due(f, last);
    text[0] = '\0';
    for (int i = 0; strstr(text, "\nat node-a ") == NULL || strstr(text, ".cold\n") == NULL; i++) {
        if (i * 5 > 60000) fail_msg("fsck.last never said where the check is: %s", text);
        usleep(5000);
        hx_read_text(last, text, sizeof(text));
    }
    hx_node_kill(&f->a);
    wait_log_count(f, "background fsck: ended: 1 nodes checked (1 ended in an error, 0 not up)", 1);
    hx_read_text(last, text, sizeof(text));
    if (strstr(text, "\nat node-a ") == NULL || strstr(text, ".cold\n") == NULL)
        fail_msg("fsck.last after the node went down: %s", text);
    unsigned long long before = hx_background_fsck_files(&f->m, 3);
    assert_int_equal(hx_stop(&f->m), 0);
    /* a node owed that holds no segment (gone from the cluster) is forgotten, said so */
    FILE *fp = fopen(last, "a");
    assert_non_null(fp);
    fputs("at node-gone 0.cold\n", fp);
    fclose(fp);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    wait_log_count(f, "background fsck: resumed: the 2 node(s) the last run still owes (those not "
                      "up wait), at 1048576 bytes/s each: node-a after ", 1);
    wait_log_count(f, "background fsck: node node-gone, owed a check, holds no segment: forgotten",
                   1);
    wait_log_count(f, "background fsck: ended: ", 4);
    unsigned long long rest = hx_background_fsck_files(&f->m, 4);
    if (rest == 0 || rest >= files || before + rest < files) {
        hx_print_log(&f->m);
        fail_msg("the check read %llu files before the node went down and %llu after, of %zu",
                 before, rest, files);
    }
    assert_int_equal(log_count(f, "background fsck: started: "), 2); /* the two that were due */
    hx_read_text(last, text, sizeof(text));
    if (strchr(text, '\n') != text + strlen(text) - 1) fail_msg("fsck.last at the end: %s", text);
    s = wx_open_store(&f->m);
    wx_wait_state(s, &b, WEIGHT_READY, WEIGHT_RES_COLD);
    wx_get_and_compare(s, &b, owed_model, OWED_TENSORS);
    weight_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fsck_of_a_large_cold_tier_reads_every_page, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_report_names_the_first_10000_orphans, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_scan_pages_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_node_without_pages_answers_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_failed_deletion_is_not_repaired_not_unchecked, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_node_that_stops_answering_is_reported_so, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_background_fsck_checks_a_node_when_it_is_back,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
