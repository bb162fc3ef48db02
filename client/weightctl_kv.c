/* weightctl_kv.c -- weightctl's plain object store commands: `kv ls
 * [PREFIX]`, `kv put KEY FILE`, `kv get KEY FILE` (the bytes checked) and
 * `kv rm KEY`, straight to the master's object service through kv_client
 * (no weight plugin needed: they work in the fallback mode too). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weightctl.h"

int wctl_cmd_kv_ls(ctl *x, const char *prefix)
{
    char cursor[2048] = "";
    int first = 1;
    if (x->json) printf("[");
    for (;;) {
        char **keys = NULL, *next = NULL;
        size_t n = 0;
        if (kvc_list(x->c, prefix, cursor, 1000, &keys, &n, &next) < 0) {
            if (x->json) printf("]\n");
            fprintf(stderr, "weightctl: kv ls: %s\n", kvc_error(x->c));
            return 1;
        }
        for (size_t i = 0; i < n; i++) {
            if (x->json) {
                if (!first) putchar(',');
                wctl_json_str(keys[i]);
            } else {
                puts(keys[i]);
            }
            first = 0;
        }
        snprintf(cursor, sizeof(cursor), "%s", next);
        kvc_list_free(keys, n, next);
        if (cursor[0] == '\0') break;
    }
    if (x->json) printf("]\n");
    return 0;
}

int wctl_cmd_kv_put(ctl *x, const char *key, const char *path)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) < 0) {
        perror(path);
        if (fd >= 0) close(fd);
        return 1;
    }
    size_t len = (size_t)st.st_size;
    void *data = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : (void *)"";
    close(fd);
    if (data == MAP_FAILED) {
        perror(path);
        return 1;
    }
    int rc = kvc_put_bytes(x->c, key, data, len, SMP_DATA_KV, NULL, 0, NULL);
    if (len) munmap(data, len);
    if (rc < 0) {
        fprintf(stderr, "weightctl: kv put %s: %s\n", key, kvc_error(x->c));
        return 1;
    }
    if (x->json) printf("{\"key\":\"%s\",\"bytes\":%zu}\n", key, len);
    return 0;
}

int wctl_cmd_kv_get(ctl *x, const char *key, const char *path)
{
    kvc_object obj;
    uint64_t len = 0;
    if (kvc_get(x->c, key, &obj) < 0) {
        fprintf(stderr, "weightctl: kv get %s: %s\n", key, kvc_error(x->c));
        return 1;
    }
    void *buf = malloc(obj.size ? obj.size : 1);
    if (buf == NULL) {
        fprintf(stderr, "weightctl: kv get %s: out of memory\n", key);
        return 1;
    }
    int rc = kvc_get_into(x->c, key, buf, obj.size, &len, 1);
    if (rc < 0) {
        fprintf(stderr, "weightctl: kv get %s: %s\n", key, kvc_error(x->c));
        free(buf);
        return 1;
    }
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    free(buf);
    if (!ok) {
        perror(path);
        return 1;
    }
    if (x->json) printf("{\"key\":\"%s\",\"bytes\":%llu}\n", key, (unsigned long long)len);
    return 0;
}

int wctl_cmd_kv_rm(ctl *x, const char *key)
{
    if (kvc_remove(x->c, key) < 0) {
        fprintf(stderr, "weightctl: kv rm %s: %s\n", key, kvc_error(x->c));
        return 1;
    }
    if (x->json) printf("{\"removed\":true}\n");
    return 0;
}

/* ======================================================================== */
/* The weight commands                                                      */
