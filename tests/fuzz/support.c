/* support.c -- the scratch directory and file helpers of the fuzz targets
 * (see fuzz.h). */
#include "fuzz.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_plugin.h"

static char scratch[256];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    return ftw->level > 0 ? remove(path) : 0;
}

void fuzz_empty_dir(const char *dir)
{
    nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void scratch_remove(void)
{
    if (scratch[0] == '\0') return;
    fuzz_empty_dir(scratch);
    rmdir(scratch);
}

const char *fuzz_scratch(void)
{
    if (scratch[0] != '\0') return scratch;
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof(scratch), "%s/wm-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(scratch) == NULL) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(scratch_remove);
    return scratch;
}

int fuzz_write_file(const char *path, const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    size_t done = 0;
    if (fd < 0) return -1;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    return close(fd) == 0 ? 0 : -1;
}

int fuzz_seed(const char *dir, const char *name, const uint8_t *data, size_t size)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (fuzz_write_file(path, data, size) < 0) {
        fprintf(stderr, "fuzz: cannot write seed %s\n", path);
        return -1;
    }
    return 1;
}

int fuzz_buf_write(void *buf, const void *data, size_t len)
{
    fuzz_buf *b = buf;
    if (len > SIZE_MAX - b->n) return SMP_ENOMEM;
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + len) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (p == NULL) return SMP_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    if (len > 0) memcpy(b->p + b->n, data, len);
    b->n += len;
    return SMP_OK;
}
