/* test_hx_leftovers.c -- a test process killed before its cleanup leaves
 * its directories behind, and the next test process removes them
 * (hx_leftovers.c); nothing that is alive, kept on purpose or not the
 * harness's is touched.
 *
 * A real child process makes a master directory with hx_init and a cold
 * directory in /dev/shm (as test_node_inventory does), links the second
 * from the first, and is killed with SIGKILL -- what ctest's timeout does.
 * No master is started: the directories are what is swept. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

/* The child: hx_init's directory and an owned one in /dev/shm linked from
 * it, both paths written to fd, then SIGKILL. */
static void child_dies(int fd, const char *shm)
{
    hx_master m;
    char link[512];
    if (hx_init(&m, "leftover", NULL) != 0 || hx_own_new_dir(shm) != 0)
        _exit(2);
    snprintf(link, sizeof(link), "%s/cold-link", m.dir);
    if (symlink(shm, link) != 0) _exit(2);
    dprintf(fd, "%s\n", m.dir);
    close(fd);
    raise(SIGKILL);
    _exit(3);
}

static const char *tmp_dir(void)
{
    const char *t = getenv("TMPDIR");
    return t && t[0] ? t : "/tmp";
}

/* The directories the test makes, removed by its teardown whatever the
 * test's outcome. */
typedef struct fx {
    char shm[128], live[256], kept[256], reused[256], dead[256];
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    if (f == NULL) return -1;
    snprintf(f->shm, sizeof(f->shm), "/dev/shm/wm-hx-leftover-%d", (int)getpid());
    snprintf(f->live, sizeof(f->live), "%s/wm-hx-live-%d", tmp_dir(), (int)getpid());
    snprintf(f->kept, sizeof(f->kept), "%s/wm-hx-kept-%d", tmp_dir(), (int)getpid());
    snprintf(f->reused, sizeof(f->reused), "%s/wm-hx-reused-%d", tmp_dir(), (int)getpid());
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    const char *dirs[] = {f->shm, f->live, f->kept, f->reused, f->dead};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        if (dirs[i][0] != '\0') hx_remove_dir(dirs[i]);
    free(f);
    return 0;
}

static void test_a_killed_test_leaves_nothing_for_long(void **state)
{
    fx *f = *state;
    char keep_file[300], owner[300], text[64];
    int fds[2];
    /* This process's own directory, with a file, that the dead one links to
     * as well: the sweep must not follow a link out of what it removes. */
    assert_int_equal(mkdir(f->live, 0700), 0);
    assert_int_equal(hx_own_dir(f->live), 0);
    snprintf(keep_file, sizeof(keep_file), "%s/data", f->live);
    write_file(keep_file, "still here\n");
    /* A directory without an owner file: kept data, not the harness's. */
    assert_int_equal(mkdir(f->kept, 0700), 0);
    /* One whose owner file names this pid with another start time: a
     * process that had this pid before. */
    assert_int_equal(mkdir(f->reused, 0700), 0);
    snprintf(owner, sizeof(owner), "%s/.owner", f->reused);
    snprintf(text, sizeof(text), "%d 1\n", (int)getpid());
    write_file(owner, text);

    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        child_dies(fds[1], f->shm);
    }
    close(fds[1]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    FILE *in = fdopen(fds[0], "r");
    assert_non_null(in);
    char *line = fgets(f->dead, sizeof(f->dead), in);
    fclose(in);
    assert_non_null(line);
    f->dead[strcspn(f->dead, "\n")] = '\0';
    char dead_link[300];
    snprintf(dead_link, sizeof(dead_link), "%s/live-link", f->dead);
    assert_int_equal(symlink(f->live, dead_link), 0);
    /* What the killed process left, as it left it. */
    assert_true(exists(f->dead));
    assert_true(exists(f->shm));

    hx_sweep_leftovers(); /* this process's first: no hx_init ran here */

    assert_false(exists(f->dead));
    assert_false(exists(f->shm));
    assert_false(exists(f->reused));
    assert_true(exists(keep_file)); /* alive, and not reached through a link */
    assert_true(exists(f->kept));
}

/* hx_disown_dir: a directory kept on purpose outlives its process. */
static void test_a_disowned_directory_is_kept(void **state)
{
    (void)state;
    hx_master m;
    char owner[400];
    assert_int_equal(hx_init(&m, "disowned", NULL), 0);
    snprintf(owner, sizeof(owner), "%s/.owner", m.dir);
    assert_true(exists(owner));
    hx_disown_dir(m.dir);
    assert_false(exists(owner));
    hx_cleanup(&m);
    assert_false(exists(m.dir));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_killed_test_leaves_nothing_for_long, setup, teardown),
        cmocka_unit_test(test_a_disowned_directory_is_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
