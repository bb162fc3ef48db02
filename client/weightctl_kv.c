/* weightctl_kv.c -- weightctl's plain object store commands: `kv ls
 * [PREFIX]`, `kv put KEY FILE`, `kv get KEY FILE` (the bytes checked) and
 * `kv rm KEY`, straight to the master's object service through kv_client
 * (no weight plugin needed: they work in the fallback mode too). FILE "-"
 * is stdin for put and stdout for get. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
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

/* Read all of stdin into *out (malloc'd, *len bytes). 0, or -1 with the
 * cause printed. */
static int read_stdin(uint8_t **out, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    if (buf == NULL) goto oom;
    for (;;) {
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (nb == NULL) goto oom;
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(0, buf + n, cap - n);
        if (got == 0) break;
        if (got < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "weightctl: kv put: reading stdin: %s\n", strerror(errno));
            free(buf);
            return -1;
        }
        n += (size_t)got;
    }
    *out = buf;
    *len = n;
    return 0;
oom:
    free(buf);
    fprintf(stderr, "weightctl: kv put: stdin: out of memory\n");
    return -1;
}

/* Print "weightctl: kv VERB KEY: cause" (sizes in the cause made readable
 * unless --bytes) and return 1. */
static int kv_failed(ctl *x, const char *verb, const char *key)
{
    char msg[1024];
    wctl_sizes_text(kvc_error(x->c), x->bytes, msg, sizeof msg);
    fprintf(stderr, "weightctl: kv %s %s: %s\n", verb, key, msg);
    return 1;
}

/* A refused put: the cause, the object's size and, when the master had no
 * room (SMP_ENOSPC), its memory capacity and use. Returns 1. */
static int kv_put_failed(ctl *x, const char *key, uint64_t len)
{
    char msg[1024], size[32], cap[32], used[32];
    kvc_status st;
    wctl_sizes_text(kvc_error(x->c), x->bytes, msg, sizeof msg);
    wctl_size_text((double)len, x->bytes, size, sizeof size);
    if (strstr(msg, "SMP_ENOSPC") && kvc_status_get(x->c, &st) == 0) {
        wctl_size_text((double)st.memory_capacity, x->bytes, cap, sizeof cap);
        wctl_size_text((double)st.memory_used, x->bytes, used, sizeof used);
        fprintf(stderr, "weightctl: kv put %s: %s (putting %s; memory: %s, %s used)\n", key,
                msg, size, cap, used);
    } else {
        fprintf(stderr, "weightctl: kv put %s: %s (putting %s)\n", key, msg, size);
    }
    return 1;
}

static void kv_json_done(const char *key, uint64_t len)
{
    printf("{\"key\":");
    wctl_json_str(key);
    printf(",\"bytes\":%llu}\n", (unsigned long long)len);
}

int wctl_cmd_kv_put(ctl *x, const char *key, const char *path)
{
    struct stat st;
    size_t len = 0;
    void *data = NULL;
    int from_stdin = strcmp(path, "-") == 0, rc;
    if (from_stdin) {
        if (read_stdin((uint8_t **)&data, &len) < 0) return 1;
    } else {
        int fd = open(path, O_RDONLY);
        if (fd < 0 || fstat(fd, &st) < 0) {
            fprintf(stderr, "weightctl: kv put %s: %s: %s\n", key, path, strerror(errno));
            if (fd >= 0) close(fd);
            return 1;
        }
        if (S_ISDIR(st.st_mode)) { /* mmap would say "No such device" */
            fprintf(stderr, "weightctl: kv put %s: %s: %s\n", key, path, strerror(EISDIR));
            close(fd);
            return 1;
        }
        len = (size_t)st.st_size;
        data = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : (void *)"";
        close(fd);
        if (data == MAP_FAILED) {
            fprintf(stderr, "weightctl: kv put %s: %s: %s\n", key, path, strerror(errno));
            return 1;
        }
    }
    if (wctl_connect_master(x) < 0) {
        rc = -1;
        goto release;
    }
    if ((rc = kvc_put_bytes(x->c, key, data, len, SMP_DATA_KV, NULL, 0, NULL)) < 0)
        kv_put_failed(x, key, len);
    else if (x->json)
        kv_json_done(key, len);
release:
    if (from_stdin) free(data);
    else if (len) munmap(data, len);
    return rc < 0 ? 1 : 0;
}

/* Write len bytes of buf to fd, all of them. 0 or -errno. */
static int write_all(int fd, const uint8_t *buf, uint64_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len > (1u << 30) ? (1u << 30) : (size_t)len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? -errno : -EIO;
        buf += w;
        len -= (uint64_t)w;
    }
    return 0;
}

int wctl_cmd_kv_get(ctl *x, const char *key, const char *path)
{
    kvc_object obj;
    uint64_t len = 0;
    int to_stdout = strcmp(path, "-") == 0;
    if (to_stdout && x->json) {
        fprintf(stderr, "weightctl: kv get: --json and '-' both want stdout; give a FILE\n");
        return 2;
    }
    if (wctl_connect_master(x) < 0) return 1;
    kvc_track_read_leases(x->c, 1);
    if (kvc_get(x->c, key, &obj) < 0) return kv_failed(x, "get", key);
    void *buf = malloc(obj.size ? obj.size : 1);
    if (buf == NULL) {
        char h[32];
        wctl_size_text((double)obj.size, x->bytes, h, sizeof h);
        fprintf(stderr, "weightctl: kv get %s: out of memory for %s\n", key, h);
        return 1;
    }
    if (kvc_get_into(x->c, key, buf, obj.size, &len, 1) < 0) {
        free(buf);
        return kv_failed(x, "get", key);
    }
    (void)kvc_release_read_leases(x->c, NULL); /* read: a removal need not wait */
    int rc;
    if (to_stdout) {
        rc = write_all(1, buf, len);
    } else {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        rc = fd < 0 ? -errno : write_all(fd, buf, len);
        if (fd >= 0 && close(fd) != 0 && rc == 0) rc = -errno;
    }
    free(buf);
    if (rc < 0) {
        fprintf(stderr, "weightctl: kv get %s: %s: %s\n", key, to_stdout ? "stdout" : path,
                strerror(-rc));
        return 1;
    }
    if (x->json) kv_json_done(key, len);
    return 0;
}

int wctl_cmd_kv_rm(ctl *x, const char *key)
{
    if (wctl_connect_master(x) < 0) return 1;
    if (kvc_remove(x->c, key) < 0) return kv_failed(x, "rm", key);
    if (x->json) printf("{\"removed\":true}\n");
    return 0;
}

int wctl_cmd_kv(ctl *x, int argc, char **argv)
{
    const char *sub = argc >= 2 ? argv[1] : "";
    if (strcmp(sub, "ls") == 0 && argc <= 3) {
        if (wctl_connect_master(x) < 0) return 1;
        return wctl_cmd_kv_ls(x, argc == 3 ? argv[2] : "");
    }
    if (strcmp(sub, "put") == 0 && argc == 4) return wctl_cmd_kv_put(x, argv[2], argv[3]);
    if (strcmp(sub, "get") == 0 && argc == 4) return wctl_cmd_kv_get(x, argv[2], argv[3]);
    if (strcmp(sub, "rm") == 0 && argc == 3) return wctl_cmd_kv_rm(x, argv[2]);
    if (strcmp(sub, "ls") && strcmp(sub, "put") && strcmp(sub, "get") && strcmp(sub, "rm")) {
        char why[300];
        snprintf(why, sizeof why, "'%s' is not ls, put, get or rm", sub);
        return wctl_bad_usage("kv", why);
    }
    return wctl_bad_usage("kv", "wrong number of arguments");
}
