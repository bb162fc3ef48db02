/* test_segment_growth.c -- segment growth and shrinking on a real master
 * with its embedded node, driven through weightctl's kv commands.
 *
 * Pinned here: a put that does not fit is refused with SMP_ENOSPC naming
 * the bytes needed, the bytes free and node.segment_bytes; raising
 * node.segment_bytes and restarting grows the segment file in place with
 * every object kept byte for byte, and the put that did not fit fits;
 * lowering it below the bytes in use is refused naming the cause (the node
 * stays out, nothing is cut, and the old setting brings everything back);
 * lowering it to what is free at the end cuts the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "weight_model.h"

#define MIB (1024ull * 1024ull)

typedef struct fixture {
    hx_master m;
    char shm[400];
} fixture;

static void configure(fixture *f, unsigned long long bytes)
{
    char cfg[1024];
    snprintf(cfg, sizeof(cfg), "node:\n  segment_dir: \"%s\"\n  segment_bytes: %llu\n  poll_ms: 10\n",
             f->shm, bytes);
    assert_int_equal(hx_reconfigure(&f->m, cfg), 0);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL || hx_init(&f->m, "seggrow", NULL) < 0) return -1;
    snprintf(f->shm, sizeof(f->shm), "%s/shm", f->m.dir);
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

/* A file of n bytes of a pattern seeded by seed, at dir/name. */
static void make_file(const fixture *f, const char *name, size_t n, unsigned seed, char *path,
                      size_t cap)
{
    snprintf(path, cap, "%s/%s", f->m.dir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    for (size_t i = 0; i < n; i++) fputc((int)((i * 131 + seed + (i >> 9)) & 0xff), fp);
    fclose(fp);
}

/* kv get KEY into a file and compare it with the file at want. */
static void assert_object(fixture *f, const char *key, const char *want)
{
    char out[4096], got[600], args[1400], cmd[1400];
    snprintf(got, sizeof(got), "%s/got.bin", f->m.dir);
    snprintf(args, sizeof(args), "kv get %s %s", key, got);
    if (wx_weightctl(&f->m, out, sizeof(out), args) != 0) {
        hx_print_log(&f->m);
        fail_msg("kv get %s: %s", key, out);
    }
    snprintf(cmd, sizeof(cmd), "cmp -s %s %s", want, got);
    if (system(cmd) != 0) fail_msg("%s does not read back byte for byte", key);
    unlink(got);
}

static uint64_t segment_file_size(fixture *f)
{
    char path[1024] = "";
    struct stat st;
    DIR *d = opendir(f->shm);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".seg") == 0)
            snprintf(path, sizeof(path), "%s/%s", f->shm, e->d_name);
    }
    closedir(d);
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

static void restart(fixture *f, unsigned long long bytes)
{
    assert_int_equal(hx_stop(&f->m), 0);
    configure(f, bytes);
    assert_int_equal(hx_start(&f->m, 20000), 0);
}

/* Segment growth: ENOSPC names what was needed, what is free and the
 * setting; a larger node.segment_bytes grows the file in place keeping
 * every object, then the put fits. Shrinking below the bytes in use is
 * refused naming the cause; shrinking to the free tail cuts the file. */
static void test_segment_growth(void **state)
{
    fixture *f = *state;
    char a[600], b[600], out[8192], args[1400];
    configure(f, 4 * MIB);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    make_file(f, "a.bin", 3 * MIB, 1, a, sizeof(a));
    make_file(f, "b.bin", 3 * MIB, 2, b, sizeof(b));
    snprintf(args, sizeof(args), "kv put obj/a %s", a);
    if (wx_weightctl(&f->m, out, sizeof(out), args) != 0) fail_msg("kv put obj/a: %s", out);

    /* does not fit: the answer says how much, what is free, what to raise */
    snprintf(args, sizeof(args), "kv put obj/b %s", b);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), args), 1);
    if (strstr(out, "SMP_ENOSPC") == NULL || strstr(out, "3.0 MiB needed") == NULL ||
        strstr(out, "largest free range is 1.0 MiB, 2.0 MiB short") == NULL ||
        strstr(out, "raise node.segment_bytes") == NULL)
        fail_msg("the ENOSPC answer does not name need, free and setting: %s", out);

    /* grown in place at the next start: obj/a kept, obj/b fits */
    restart(f, 8 * MIB);
    assert_int_equal(segment_file_size(f), 8 * MIB);
    assert_true(hx_log_contains(&f->m, "segment grown in place from 4194304 to 8388608 bytes"));
    assert_object(f, "obj/a", a);
    if (wx_weightctl(&f->m, out, sizeof(out), args) != 0) fail_msg("kv put obj/b after the growth: %s", out);
    assert_object(f, "obj/b", b);

    /* below the bytes in use: refused naming the cause, nothing cut */
    assert_int_equal(hx_stop(&f->m), 0);
    configure(f, 2 * MIB);
    f->m.expect_nodes = 0;
    assert_int_equal(hx_start(&f->m, 20000), 0);
    for (int i = 0; !hx_log_contains(&f->m, "is below the bytes in use"); i++) {
        if (i > 2000) fail_msg("no refusal of the shrink in the log");
        usleep(10000);
    }
    assert_true(hx_log_contains(&f->m, "raise node.segment_bytes to at least 6291456"));
    assert_int_equal(segment_file_size(f), 8 * MIB);
    f->m.expect_nodes = 1;
    restart(f, 8 * MIB);
    assert_object(f, "obj/a", a);
    assert_object(f, "obj/b", b);

    /* to the free tail: obj/b gone, the file is cut to 4 MiB, obj/a kept */
    for (int i = 0; wx_weightctl(&f->m, out, sizeof(out), "kv rm obj/b") != 0; i++) {
        /* the read lease of the get above (10 s) refuses it until it ends */
        if (strstr(out, "SMP_EBUSY") == NULL || i > 300) fail_msg("kv rm obj/b: %s", out);
        usleep(100000);
    }
    restart(f, 4 * MIB);
    for (int i = 0; segment_file_size(f) != 4 * MIB; i++) {
        if (i > 2000) fail_msg("the segment file was not cut to 4 MiB");
        usleep(10000);
    }
    assert_object(f, "obj/a", a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_segment_growth, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
