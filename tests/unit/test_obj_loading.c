/* test_obj_loading.c -- a store a snapshot loads into on a thread of its
 * own belongs to that thread until the load is joined (obj_store.h,
 * obj_store_loading_begin).
 *
 * The thread inside obj_store_load may use the store; once loading_end is
 * called the owner sees every object. In a debug build (the sanitizer
 * build) a call from any other thread meanwhile aborts naming the entry
 * point; a release build keeps only the flag (that case is skipped). And
 * every entry point of obj_store.h that takes the store starts with the
 * check, read from the sources: an entry point added without it fails
 * here; and the master names the store only through master_objs(m) (its
 * field appears only where the store is made, loaded and destroyed). */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "obj_test_store.h"

#define MASTER_DIR SOURCE_DIR "/host_shim/master"


typedef struct image {
    uint8_t *buf;
    size_t len;
} image;

static int image_write(void *ctx, const void *buf, size_t len)
{
    image *im = ctx;
    uint8_t *grown = realloc(im->buf, im->len + len);
    if (grown == NULL) return SMP_ENOMEM;
    memcpy(grown + im->len, buf, len);
    im->buf = grown;
    im->len += len;
    return 0;
}

typedef struct load {
    obj_store *st;
    const image *im;
    int rc;
} load;

static void *load_run(void *arg)
{
    load *l = arg;
    l->rc = obj_store_load(l->st, l->im->buf, l->im->len);
    return NULL;
}

/* The load runs on its own thread between loading_begin and loading_end;
 * after the join the owner sees the object. */
static void test_the_loading_thread_loads_and_the_owner_sees_it_after_the_join(void **state)
{
    (void)state;
    image im = {0};
    obj_store *from = store_with_object(), *st = NULL;
    assert_int_equal(obj_store_save(from, image_write, &im), 0);
    assert_int_equal(obj_store_create(&st, NULL), SMP_OK);
    load l = {st, &im, -1};
    pthread_t t;
    obj_store_loading_begin(st);
    assert_int_equal(pthread_create(&t, NULL, load_run, &l), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    obj_store_loading_end(st);
    assert_int_equal(l.rc, SMP_OK);
    assert_int_equal(obj_exists(st, "k"), 1);
    obj_store_destroy(st);
    obj_store_destroy(from);
    free(im.buf);
}

/* A call from a thread other than the loading one while the load runs
 * aborts, naming the entry point (debug builds). */
static void test_a_call_from_another_thread_during_the_load_aborts(void **state)
{
    (void)state;
#ifdef NDEBUG
    skip(); /* a release build keeps only the flag */
#else
    int fds[2];
    char out[512] = "";
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        obj_store *st = NULL;
        dup2(fds[1], STDERR_FILENO);
        if (obj_store_create(&st, NULL) != SMP_OK) _exit(2);
        obj_store_loading_begin(st); /* the load is on another thread */
        (void)obj_exists(st, "k");
        _exit(0); /* not reached: the check aborts */
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < sizeof(out) && (r = read(fds[0], out + n, sizeof(out) - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    assert_non_null(strstr(out, "obj_store: obj_exists called while a snapshot loads into the "
                                "store on another thread"));
#endif
}

/* -- every entry point checks its caller --------------------------------------- */

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) fail_msg("%s: cannot open", path);
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    do {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
    } while (n > 0);
    fclose(f);
    buf[len] = '\0';
    return buf;
}

/* The names of the functions obj_store.h declares that take the store
 * (a declaration starts at column 0 and ends with ");"), but those that
 * make it and mark or run its load. At most cap; returns how many. */
static size_t entry_points(const char *h, char names[][64], size_t cap)
{
    size_t n = 0;
    for (const char *line = h; line != NULL && *line; line = strchr(line, '\n')) {
        if (*line == '\n') line++;
        if (*line < 'a' || *line > 'z' || strncmp(line, "typedef", 7) == 0) continue;
        const char *open = strchr(line, '(');
        const char *end = strstr(line, ");");
        const char *semi = strchr(line, ';');
        if (open == NULL || end == NULL || semi == NULL || end + 1 != semi) continue;
        if (memchr(line, '\n', (size_t)(open - line)) != NULL) continue;
        const char *name = open;
        while (name > line && (name[-1] == '_' || (name[-1] >= 'a' && name[-1] <= 'z') ||
                               (name[-1] >= '0' && name[-1] <= '9')))
            name--;
        size_t nl = (size_t)(open - name);
        char params[2048];
        size_t pl = (size_t)(end - open);
        if (pl >= sizeof(params) || nl >= 64) continue;
        memcpy(params, open, pl);
        params[pl] = '\0';
        if (strstr(params, "obj_store *") == NULL) continue;
        static const char *const owner_only[] = {"obj_store_create", "obj_store_load",
                                                 "obj_store_load_fed",
                                                 "obj_store_loading_begin",
                                                 "obj_store_loading_end"};
        int skip_it = 0;
        for (size_t k = 0; k < sizeof(owner_only) / sizeof(owner_only[0]); k++)
            skip_it |= strlen(owner_only[k]) == nl && strncmp(name, owner_only[k], nl) == 0;
        if (skip_it) continue;
        assert_true(n < cap);
        memcpy(names[n], name, nl);
        names[n][nl] = '\0';
        n++;
    }
    return n;
}

/* Whether src defines name (a line that starts with the return type and
 * holds "name(", not ending in ';', not static) with OBJ_CHECK_CALLER(st);
 * as the first statement of its body. 1 checked, 0 not there, -1 there
 * without the check. */
static int defines_with_check(const char *src, const char *name)
{
    char pat[80];
    snprintf(pat, sizeof(pat), "%s(", name);
    for (const char *at = strstr(src, pat); at != NULL; at = strstr(at + 1, pat)) {
        const char *line = at;
        while (line > src && line[-1] != '\n') line--;
        if (*line < 'a' || *line > 'z' || strncmp(line, "static", 6) == 0) continue;
        char c = at > line ? at[-1] : ' ';
        if (c != ' ' && c != '*') continue; /* a longer name ending in name */
        const char *brace = strstr(at, "\n{\n");
        const char *semi = strchr(at, ';');
        if (brace == NULL || (semi != NULL && semi < brace)) continue; /* a declaration */
        const char *body = brace + 3;
        while (*body == ' ') body++;
        return strncmp(body, "OBJ_CHECK_CALLER(st);", 21) == 0 ? 1 : -1;
    }
    return 0;
}

static void test_every_entry_point_that_takes_the_store_checks_its_caller(void **state)
{
    (void)state;
    static const char *const files[] = {
        "obj_store.c", "obj_store_index.c", "obj_store_put.c",
        "obj_store_records.c", "obj_store_remove.c", "obj_store_snapshot.c",
        "obj_store_released.c", "obj_store_zones.c",
    };
    static char names[128][64];
    char *h = read_all(MASTER_DIR "/obj_store.h");
    size_t n = entry_points(h, names, 128);
    char *src[sizeof(files) / sizeof(files[0])];
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", MASTER_DIR, files[f]);
        src[f] = read_all(path);
    }
    assert_true(n >= 50); /* the header's reading found the entry points */
    for (size_t i = 0; i < n; i++) {
        int found = 0;
        for (size_t f = 0; f < sizeof(files) / sizeof(files[0]) && !found; f++) {
            int r = defines_with_check(src[f], names[i]);
            if (r < 0)
                fail_msg("%s (%s) does not start with OBJ_CHECK_CALLER(st);", names[i], files[f]);
            found = r;
        }
        if (!found) fail_msg("%s: no definition found in host_shim/master/obj_store*.c", names[i]);
    }
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) free(src[f]);
    free(h);
}

/* The master names the store's field (m->objs_) only where the store is
 * made, destroyed and loaded, and in the accessor: every other file goes
 * through master_objs(m), which waits for a load. */
static void test_the_master_reaches_the_store_only_through_its_accessor(void **state)
{
    (void)state;
    static const char *const allowed[] = {"master.c", "master_recovery.c", "master_internal.h"};
    DIR *d = opendir(MASTER_DIR);
    assert_non_null(d);
    size_t checked = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t nl = strlen(e->d_name);
        if (strncmp(e->d_name, "master", 6) != 0 || nl < 3 ||
            (strcmp(e->d_name + nl - 2, ".c") != 0 && strcmp(e->d_name + nl - 2, ".h") != 0))
            continue;
        int ok = 0;
        for (size_t k = 0; k < sizeof(allowed) / sizeof(allowed[0]); k++)
            ok |= strcmp(e->d_name, allowed[k]) == 0;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", MASTER_DIR, e->d_name);
        char *src = read_all(path);
        if (!ok && (strstr(src, "objs_.") != NULL || strstr(src, "->objs") != NULL))
            fail_msg("%s names the store's field: use master_objs(m)", e->d_name);
        free(src);
        checked++;
    }
    closedir(d);
    assert_true(checked >= 15);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_loading_thread_loads_and_the_owner_sees_it_after_the_join),
        cmocka_unit_test(test_a_call_from_another_thread_during_the_load_aborts),
        cmocka_unit_test(test_every_entry_point_that_takes_the_store_checks_its_caller),
        cmocka_unit_test(test_the_master_reaches_the_store_only_through_its_accessor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
