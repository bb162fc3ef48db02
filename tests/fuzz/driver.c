/* driver.c -- main() for a fuzz target outside libFuzzer: writes its seeds,
 * or runs the inputs given and a fixed number of deterministic mutations of
 * each, so the default suite (plain and sanitizer builds) exercises every
 * target without clang.
 *
 *   fuzz_x --seeds DIR                 write the target's seeds into DIR
 *   fuzz_x [--mutate N] [--rng S] PATH...
 *                                      every file (a directory: each file in
 *                                      it, in name order), then N mutants of
 *                                      each (1 to 4 edits: bit flips, special
 *                                      bytes and integers, truncation,
 *                                      insertion, deletion, a copied chunk)
 *
 * Mutants are a function of (--rng, file order, N), so a failure repeats.
 * On a crash the input being run is written to ./fuzz-crash-input before the
 * process dies, to be replayed with `fuzz_x fuzz-crash-input`. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

#define FUZZ_MAX_INPUT (1u << 20)

/* The input being run, for the crash handler. */
static const uint8_t *cur_data;
static size_t cur_size;

static void on_crash(int sig)
{
    static const char msg[] = "fuzz: crashed; the input is in ./fuzz-crash-input\n";
    int fd = open("fuzz-crash-input", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0 && cur_data != NULL) {
        size_t done = 0;
        while (done < cur_size) {
            ssize_t w = write(fd, cur_data + done, cur_size - done);
            if (w <= 0) break;
            done += (size_t)w;
        }
        close(fd);
    }
    ssize_t ignored = write(2, msg, sizeof(msg) - 1);
    (void)ignored;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run_one(const uint8_t *data, size_t size)
{
    cur_data = data;
    cur_size = size;
    LLVMFuzzerTestOneInput(data, size);
    cur_data = NULL;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static size_t below(uint64_t *s, size_t n)
{
    return n ? (size_t)(rng_next(s) % n) : 0;
}

/* One edit of buf[0..*size) (capacity FUZZ_MAX_INPUT). */
static void mutate_once(uint8_t *buf, size_t *size, uint64_t *s)
{
    static const uint8_t bytes[] = {0x00, 0x01, 0x7f, 0x80, 0xff, '"', '{', '\n'};
    static const uint32_t ints[] = {0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff, 0x80000000u,
                                    0xffffffffu};
    size_t n = *size;
    switch (below(s, 7)) {
    case 0: /* flip a bit */
        if (n) buf[below(s, n)] ^= (uint8_t)(1u << below(s, 8));
        break;
    case 1: /* a special byte */
        if (n) buf[below(s, n)] = bytes[below(s, sizeof(bytes))];
        break;
    case 2: { /* a special 32-bit integer, either byte order */
        if (n < 4) break;
        uint32_t v = ints[below(s, sizeof(ints) / sizeof(ints[0]))];
        size_t at = below(s, n - 3);
        int big = (int)below(s, 2);
        for (int i = 0; i < 4; i++)
            buf[at + (size_t)i] = (uint8_t)(v >> (big ? 24 - 8 * i : 8 * i));
        break;
    }
    case 3: /* truncate */
        *size = below(s, n + 1);
        break;
    case 4: { /* insert 1..16 random bytes */
        size_t k = 1 + below(s, 16), at = below(s, n + 1);
        if (n + k > FUZZ_MAX_INPUT) break;
        memmove(buf + at + k, buf + at, n - at);
        for (size_t i = 0; i < k; i++) buf[at + i] = (uint8_t)rng_next(s);
        *size = n + k;
        break;
    }
    case 5: { /* delete a range */
        if (!n) break;
        size_t at = below(s, n), k = 1 + below(s, n - at < 64 ? n - at : 64);
        memmove(buf + at, buf + at + k, n - at - k);
        *size = n - k;
        break;
    }
    default: { /* copy a chunk over another place */
        if (n < 2) break;
        size_t from = below(s, n), to = below(s, n), k = 1 + below(s, 32);
        if (from + k > n) k = n - from;
        if (to + k > n) k = n - to;
        memmove(buf + to, buf + from, k);
        break;
    }
    }
}

static int read_file(const char *path, uint8_t **out, size_t *size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = malloc(FUZZ_MAX_INPUT);
    size_t n = 0;
    if (f == NULL || buf == NULL) {
        if (f) fclose(f);
        free(buf);
        return -1;
    }
    n = fread(buf, 1, FUZZ_MAX_INPUT, f);
    fclose(f);
    *out = buf;
    *size = n;
    return 0;
}

typedef struct run_state {
    long mutants;
    uint64_t rng;
    long files, runs;
} run_state;

static int run_file(const char *path, run_state *st)
{
    uint8_t *orig, *buf;
    size_t size;
    if (read_file(path, &orig, &size) < 0) {
        fprintf(stderr, "fuzz: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    if ((buf = malloc(FUZZ_MAX_INPUT)) == NULL) {
        free(orig);
        return -1;
    }
    run_one(orig, size);
    st->files++;
    st->runs++;
    for (long i = 0; i < st->mutants; i++) {
        size_t n = size;
        memcpy(buf, orig, size);
        for (size_t e = 1 + below(&st->rng, 4); e > 0; e--) mutate_once(buf, &n, &st->rng);
        run_one(buf, n);
        st->runs++;
    }
    free(buf);
    free(orig);
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir, in name order. */
static int run_dir(const char *dir, run_state *st)
{
    DIR *d = opendir(dir);
    char **names = NULL, path[4096];
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    if (d == NULL) return -1;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            char **nn = realloc(names, (cap = cap ? 2 * cap : 16) * sizeof(*names));
            if (nn == NULL) {
                rc = -1;
                break;
            }
            names = nn;
        }
        if ((names[n] = strdup(e->d_name)) == NULL) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (rc == 0 && stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) rc = run_file(path, st);
        free(names[i]);
    }
    free(names);
    return rc;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s --seeds DIR\n"
            "       %s [--mutate N] [--rng S] PATH...\n",
            argv0, argv0);
    return 2;
}

int main(int argc, char **argv)
{
    run_state st = {0, UINT64_C(0x9E3779B97F4A7C15), 0, 0};
    int i = 1;
    if (argc == 3 && strcmp(argv[1], "--seeds") == 0) {
        int n = fuzz_seeds(argv[2]);
        if (n <= 0) {
            fprintf(stderr, "%s: no seeds written\n", argv[0]);
            return 1;
        }
        printf("%s: %d seeds in %s\n", argv[0], n, argv[2]);
        return 0;
    }
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (strcmp(argv[i], "--mutate") == 0) st.mutants = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--rng") == 0) st.rng = strtoull(argv[i + 1], NULL, 0) | 1;
        else return usage(argv[0]);
    }
    if (i >= argc || st.mutants < 0) return usage(argv[0]);
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGABRT, on_crash);
    signal(SIGFPE, on_crash);
    signal(SIGILL, on_crash);
    for (; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) < 0) {
            fprintf(stderr, "%s: %s: %s\n", argv[0], argv[i], strerror(errno));
            return 1;
        }
        if ((S_ISDIR(sb.st_mode) ? run_dir(argv[i], &st) : run_file(argv[i], &st)) < 0) {
            fprintf(stderr, "%s: cannot run %s\n", argv[0], argv[i]);
            return 1;
        }
    }
    if (st.files == 0) {
        fprintf(stderr, "%s: no inputs\n", argv[0]);
        return 1;
    }
    printf("%s: %ld inputs, %ld runs with mutants, none crashed\n", argv[0], st.files, st.runs);
    return 0;
}
