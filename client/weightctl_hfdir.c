/* weightctl_hfdir.c -- reading a Hugging Face model directory for `put
 * --from-dir`: which safetensors files hold the tensors (the files named by
 * model.safetensors.index.json's weight_map, or the single
 * model.safetensors), and the directory's other small regular files (config
 * .json, tokenizer files, generation_config.json, ...) read into memory as
 * the revision's attachments. Everything is checked before anything is sent:
 * a shard the index names but the directory lacks, a file over the
 * attachment cap, an index that does not parse, each refused naming the
 * file. Hidden files, subdirectories and safetensors files the index does
 * not name are not stored, and put says so. The index itself is not stored:
 * it describes the shard layout, which a get rewrites (model.safetensors). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weightctl.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

/* 1 when name ends with suffix. */
static int ends_with(const char *name, const char *suffix)
{
    size_t n = strlen(name), s = strlen(suffix);
    return n >= s && strcmp(name + n - s, suffix) == 0;
}

/* Append a copy of s to (*v)[*n]. 0 or -1 (out of memory). */
static int push_str(char ***v, size_t *n, const char *s)
{
    char **nv = realloc(*v, (*n + 1) * sizeof **v);
    if (nv == NULL) return -1;
    *v = nv;
    if ((nv[*n] = strdup(s)) == NULL) return -1;
    (*n)++;
    return 0;
}

/* The index: the shard files of its weight_map (each once, in first-seen
 * order) and each tensor's file. 0, or 1 with the cause printed. */
static int read_index(const char *dir, wctl_hfdir *h)
{
    char path[4096];
    json_error_t je;
    snprintf(path, sizeof path, "%s/%s", dir, INDEX_NAME);
    json_t *root = json_load_file(path, 0, &je);
    json_t *map = root ? json_object_get(root, "weight_map") : NULL;
    const char *tensor;
    json_t *file;
    if (root == NULL || !json_is_object(map)) {
        fprintf(stderr, "weightctl: put: --from-dir %s: %s: %s\n", dir, INDEX_NAME,
                root ? "no \"weight_map\" object" : je.text);
        json_decref(root);
        return 1;
    }
    json_object_foreach(map, tensor, file) {
        const char *f = json_string_value(file);
        if (f == NULL || f[0] == '\0' || strchr(f, '/') != NULL || !ends_with(f, ".safetensors")) {
            fprintf(stderr, "weightctl: put: --from-dir %s: %s: tensor %s: '%s' is not a "
                    ".safetensors file of the directory\n", dir, INDEX_NAME, tensor, f ? f : "?");
            json_decref(root);
            return 1;
        }
        size_t k = 0;
        while (k < h->n_shards && strcmp(h->shards[k], f) != 0) k++;
        if ((k == h->n_shards && push_str(&h->shards, &h->n_shards, f) < 0) ||
            push_str(&h->map_tensor, &h->n_map, tensor) < 0) {
            json_decref(root);
            fprintf(stderr, "weightctl: put: out of memory\n");
            return 1;
        }
        size_t *nf = realloc(h->map_file, h->n_map * sizeof *nf);
        if (nf == NULL) {
            json_decref(root);
            fprintf(stderr, "weightctl: put: out of memory\n");
            return 1;
        }
        h->map_file = nf;
        h->map_file[h->n_map - 1] = k;
    }
    json_decref(root);
    if (h->n_shards == 0) {
        fprintf(stderr, "weightctl: put: --from-dir %s: %s names no tensor\n", dir, INDEX_NAME);
        return 1;
    }
    return 0;
}

/* Read DIR/name (size bytes, at most the cap) into a new attachment. 0, or
 * 1 with the cause printed. */
static int read_attachment(const char *dir, const char *name, uint64_t size, wctl_hfdir *h)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    wctl_hfdir_file *na = realloc(h->att, (h->n_att + 1) * sizeof *na);
    if (na == NULL) goto oom;
    h->att = na;
    wctl_hfdir_file *a = &h->att[h->n_att];
    memset(a, 0, sizeof *a);
    if ((a->name = strdup(name)) == NULL || (a->data = malloc(size ? size : 1)) == NULL) {
        free(a->name);
        goto oom;
    }
    h->n_att++;
    int fd = open(path, O_RDONLY);
    uint64_t got = 0;
    while (fd >= 0 && got < size) {
        ssize_t r = read(fd, a->data + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (uint64_t)r;
    }
    int e = errno;
    if (fd >= 0) close(fd);
    if (got != size) {
        fprintf(stderr, "weightctl: put: --from-dir %s: %s: %s\n", dir, name,
                fd < 0 || e ? strerror(e) : "changed while it was read");
        return 1;
    }
    a->bytes = size;
    return 0;
oom:
    fprintf(stderr, "weightctl: put: out of memory\n");
    return 1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int wctl_hfdir_read(const ctl *x, const char *dir, wctl_hfdir *h)
{
    char path[4096], skipped[1024] = "";
    struct stat st;
    int rc = 1;
    memset(h, 0, sizeof *h);
    snprintf(path, sizeof path, "%s/%s", dir, INDEX_NAME);
    if (stat(path, &st) == 0) {
        if ((rc = read_index(dir, h)) != 0) return rc;
    } else {
        snprintf(path, sizeof path, "%s/%s", dir, SINGLE_NAME);
        if (stat(path, &st) != 0) {
            fprintf(stderr, "weightctl: put: --from-dir %s: neither %s nor %s is there\n", dir,
                    INDEX_NAME, SINGLE_NAME);
            return 1;
        }
        if (push_str(&h->shards, &h->n_shards, SINGLE_NAME) < 0) return 1;
    }
    /* The whole shard set, or nothing. */
    for (size_t k = 0; k < h->n_shards; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, h->shards[k]);
        int absent = stat(path, &st) != 0, e = absent ? errno : 0;
        if (absent || !S_ISREG(st.st_mode)) {
            fprintf(stderr, "weightctl: put: --from-dir %s: %s, named by %s, is %s\n", dir,
                    h->shards[k], INDEX_NAME,
                    !absent ? "not a regular file" : e == ENOENT ? "missing" : strerror(e));
            return 1;
        }
    }
    /* The other files, in name order. */
    DIR *d = opendir(dir);
    struct dirent *de;
    char **names = NULL;
    size_t n_names = 0;
    if (d == NULL) {
        fprintf(stderr, "weightctl: put: --from-dir %s: %s\n", dir, strerror(errno));
        return 1;
    }
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
            push_str(&names, &n_names, de->d_name) < 0)
            break;
    closedir(d);
    qsort(names, n_names, sizeof *names, cmp_str);
    rc = 0;
    for (size_t i = 0; i < n_names && rc == 0; i++) {
        const char *name = names[i], *why = NULL;
        int shard = 0;
        for (size_t k = 0; k < h->n_shards; k++) shard |= strcmp(h->shards[k], name) == 0;
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (shard || strcmp(name, INDEX_NAME) == 0) continue;
        if (name[0] == '.') why = "hidden";
        else if (stat(path, &st) != 0) why = "unreadable";
        else if (S_ISDIR(st.st_mode)) why = "a directory";
        else if (!S_ISREG(st.st_mode)) why = "not a regular file";
        else if (ends_with(name, ".safetensors")) why = "not in the shard set";
        if (why != NULL) {
            size_t used = strlen(skipped);
            snprintf(skipped + used, sizeof skipped - used, "%s%s (%s)", used ? ", " : "", name, why);
            continue;
        }
        if ((uint64_t)st.st_size > WEIGHT_ATTACHMENT_MAX_BYTES) {
            char size[32], cap[32];
            wctl_size_text((double)st.st_size, x->bytes, size, sizeof size);
            wctl_size_text((double)WEIGHT_ATTACHMENT_MAX_BYTES, x->bytes, cap, sizeof cap);
            fprintf(stderr, "weightctl: put: --from-dir %s: %s is %s, over the %s an attachment "
                    "may hold\n", dir, name, size, cap);
            rc = 1;
            break;
        }
        rc = read_attachment(dir, name, (uint64_t)st.st_size, h);
    }
    for (size_t i = 0; i < n_names; i++) free(names[i]);
    free(names);
    if (rc == 0 && skipped[0])
        fprintf(stderr, "weightctl: put: --from-dir %s: not stored: %s\n", dir, skipped);
    return rc;
}

int wctl_hfdir_check(const char *dir, const wctl_hfdir *h, const wc_st_file *files)
{
    for (size_t i = 0; i < h->n_map; i++) {
        if (wc_st_find(&files[h->map_file[i]].header, h->map_tensor[i]) >= 0) continue;
        fprintf(stderr, "weightctl: put: --from-dir %s: %s puts tensor %s in %s, which does not "
                "hold it\n", dir, INDEX_NAME, h->map_tensor[i], h->shards[h->map_file[i]]);
        return 1;
    }
    return 0;
}

void wctl_hfdir_free(wctl_hfdir *h)
{
    for (size_t i = 0; i < h->n_shards; i++) free(h->shards[i]);
    for (size_t i = 0; i < h->n_map; i++) free(h->map_tensor[i]);
    for (size_t i = 0; i < h->n_att; i++) {
        free(h->att[i].name);
        free(h->att[i].data);
    }
    free(h->shards);
    free(h->map_tensor);
    free(h->map_file);
    free(h->att);
    memset(h, 0, sizeof *h);
}
