/* wc_safetensors.c -- the safetensors header parser and writer (jansson for
 * the JSON), and the read-only mapping of a file.
 *
 * The parser checks in this order: the prefix (present, length inside the
 * file and bounded), the JSON (parses, no duplicate keys, an object), each
 * entry (dtype, shape, offsets, size), then overlaps across entries and
 * that the data ends with the last tensor's. All
 * arithmetic on numbers from the file is overflow-checked. See
 * wc_safetensors.h for the format and the rules. */
#include "wc_safetensors.h"
#include "wm_errbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#define META_KEY "__metadata__"

static char *dup_str(const char *s)
{
    size_t l = strlen(s);
    char *p = malloc(l + 1);
    if (p != NULL) memcpy(p, s, l + 1);
    return p;
}

/* ---- parsing ------------------------------------------------------------- */

int wc_st_header_len(const uint8_t prefix[8], uint64_t file_size, uint64_t *out, char *err,
                     size_t errlen)
{
    uint64_t n = 0;
    if (file_size < 8) {
        wm_errbuf(err, errlen, "safetensors: file of %llu bytes is too short for the 8-byte "
                "header length", (unsigned long long)file_size);
        return SMP_EPROTO;
    }
    for (int i = 7; i >= 0; i--) n = (n << 8) | prefix[i];
    /* past the end first: what a file of another kind (text, ...) shows */
    if (n > file_size - 8) {
        wm_errbuf(err, errlen, "safetensors: not a safetensors file: its first 8 bytes give a "
                "header length of %llu, which runs past the end of the %llu-byte file",
                (unsigned long long)n, (unsigned long long)file_size);
        return SMP_EPROTO;
    }
    if (n > WC_ST_MAX_HEADER) {
        wm_errbuf(err, errlen, "safetensors: header length %llu is over the %llu-byte limit",
                (unsigned long long)n, (unsigned long long)WC_ST_MAX_HEADER);
        return SMP_EPROTO;
    }
    if (n < 2) {
        wm_errbuf(err, errlen, "safetensors: header length %llu cannot hold a JSON object",
                (unsigned long long)n);
        return SMP_EPROTO;
    }
    *out = n;
    return SMP_OK;
}

void wc_st_header_free(wc_st_header *h)
{
    if (h == NULL) return;
    for (size_t i = 0; i < h->n_tensors; i++) free(h->tensors[i].name);
    free(h->tensors);
    for (size_t i = 0; i < h->n_meta; i++) {
        free(h->meta[i].key);
        free(h->meta[i].value);
    }
    free(h->meta);
    memset(h, 0, sizeof *h);
}

/* A non-negative JSON integer, or -1 (not an integer, or negative). */
static int json_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v)) return -1;
    json_int_t i = json_integer_value(v);
    if (i < 0) return -1;
    *out = (uint64_t)i;
    return 0;
}

/* Fill t from the JSON object v of the tensor called name. */
static int parse_entry(const char *name, json_t *v, uint64_t data_len, wc_st_tensor *t,
                       uint64_t data_start, char *err, size_t errlen)
{
    if (!json_is_object(v)) {
        wm_errbuf(err, errlen, "safetensors: tensor '%s': entry is not a JSON object", name);
        return SMP_EPROTO;
    }
    json_t *dt = json_object_get(v, "dtype");
    json_t *shape = json_object_get(v, "shape");
    json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt)) {
        wm_errbuf(err, errlen, "safetensors: tensor '%s': no dtype string", name);
        return SMP_EPROTO;
    }
    t->dtype = wc_dtype_from_name(json_string_value(dt), json_string_length(dt));
    if (t->dtype == WC_DTYPE_INVALID) {
        wm_errbuf(err, errlen, "safetensors: tensor '%s': unknown dtype '%.32s'", name,
                json_string_value(dt));
        return SMP_EPROTO;
    }
    if (!json_is_array(shape)) {
        wm_errbuf(err, errlen, "safetensors: tensor '%s': no shape array", name);
        return SMP_EPROTO;
    }
    if (json_array_size(shape) > WC_MAX_NDIM) {
        wm_errbuf(err, errlen, "safetensors: tensor '%s': %zu dimensions, at most %d supported",
                name, json_array_size(shape), WC_MAX_NDIM);
        return SMP_EPROTO;
    }
    t->ndim = (uint32_t)json_array_size(shape);
    for (uint32_t d = 0; d < t->ndim; d++) {
        if (json_u64(json_array_get(shape, d), &t->shape[d]) < 0) {
            wm_errbuf(err, errlen, "safetensors: tensor '%s': shape[%u] is not a non-negative "
                    "integer", name, d);
            return SMP_EPROTO;
        }
    }
    uint64_t begin, end;
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        json_u64(json_array_get(offs, 0), &begin) < 0 ||
        json_u64(json_array_get(offs, 1), &end) < 0) {
        wm_errbuf(err, errlen, "safetensors: tensor '%s': data_offsets is not two non-negative "
                "integers", name);
        return SMP_EPROTO;
    }
    if (begin > end || end > data_len) {
        wm_errbuf(err, errlen, "safetensors: tensor '%s': data_offsets [%llu, %llu] fall "
                "outside the %llu data bytes of the file", name, (unsigned long long)begin,
                (unsigned long long)end, (unsigned long long)data_len);
        return SMP_EPROTO;
    }
    uint64_t want;
    if (wc_shape_bytes(t->shape, t->ndim, wc_dtype_size(t->dtype), &want) < 0) {
        wm_errbuf(err, errlen, "safetensors: tensor '%s': shape makes more than 2^64 bytes",
                name);
        return SMP_EPROTO;
    }
    if (want != end - begin) {
        wm_errbuf(err, errlen, "safetensors: tensor '%s': shape and dtype make %llu bytes, "
                "data_offsets hold %llu", name, (unsigned long long)want,
                (unsigned long long)(end - begin));
        return SMP_EPROTO;
    }
    t->offset = data_start + begin;
    t->bytes = end - begin;
    return SMP_OK;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const wc_st_tensor *x = *(wc_st_tensor *const *)a, *y = *(wc_st_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
    return 0;
}

static int cmp_by_name(const void *a, const void *b)
{
    return strcmp(((const wc_st_tensor *)a)->name, ((const wc_st_tensor *)b)->name);
}

static int cmp_meta(const void *a, const void *b)
{
    return strcmp(((const wc_st_meta *)a)->key, ((const wc_st_meta *)b)->key);
}

static int parse_meta(json_t *v, wc_st_header *h, char *err, size_t errlen)
{
    const char *k;
    json_t *val;
    if (!json_is_object(v)) {
        wm_errbuf(err, errlen, "safetensors: __metadata__ is not a JSON object");
        return SMP_EPROTO;
    }
    h->meta = calloc(json_object_size(v) + 1, sizeof *h->meta);
    if (h->meta == NULL) return SMP_ENOMEM;
    json_object_foreach(v, k, val) {
        if (!json_is_string(val)) {
            wm_errbuf(err, errlen, "safetensors: __metadata__ value of '%s' is not a string", k);
            return SMP_EPROTO;
        }
        wc_st_meta *m = &h->meta[h->n_meta];
        m->key = dup_str(k);
        m->value = dup_str(json_string_value(val));
        if (m->key == NULL || m->value == NULL) {
            free(m->key);
            free(m->value);
            return SMP_ENOMEM;
        }
        h->n_meta++;
    }
    qsort(h->meta, h->n_meta, sizeof *h->meta, cmp_meta);
    return SMP_OK;
}

int wc_st_parse(const uint8_t *buf, size_t len, uint64_t file_size, wc_st_header *out,
                char *err, size_t errlen)
{
    int rc;
    uint64_t hlen;
    json_error_t jerr;
    json_t *root = NULL;
    wc_st_tensor **by_offset = NULL;

    memset(out, 0, sizeof *out);
    if (buf == NULL || len < 8) {
        wm_errbuf(err, errlen, "safetensors: truncated: %zu bytes, the header length needs 8",
                buf ? len : 0);
        return SMP_EPROTO;
    }
    if ((rc = wc_st_header_len(buf, file_size, &hlen, err, errlen)) < 0) return rc;
    if (len - 8 < hlen) {
        wm_errbuf(err, errlen, "safetensors: truncated header: %zu of %llu bytes present",
                len - 8, (unsigned long long)hlen);
        return SMP_EPROTO;
    }
    out->header_len = hlen;
    out->data_start = 8 + hlen;
    root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        wm_errbuf(err, errlen, "safetensors: not a safetensors file: its header is not JSON: "
                "%s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
        return SMP_EPROTO;
    }
    if (!json_is_object(root)) {
        wm_errbuf(err, errlen, "safetensors: header JSON is not an object");
        rc = SMP_EPROTO;
        goto free_json;
    }
    rc = SMP_ENOMEM;
    out->tensors = calloc(json_object_size(root) + 1, sizeof *out->tensors);
    if (out->tensors == NULL) goto free_json;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, META_KEY) == 0) {
            if ((rc = parse_meta(val, out, err, errlen)) < 0) goto free_json;
            continue;
        }
        if (key[0] == '\0') {
            wm_errbuf(err, errlen, "safetensors: a tensor has an empty name");
            rc = SMP_EPROTO;
            goto free_json;
        }
        wc_st_tensor *t = &out->tensors[out->n_tensors];
        memset(t, 0, sizeof *t);
        rc = parse_entry(key, val, file_size - out->data_start, t, out->data_start, err,
                         errlen);
        if (rc < 0) goto free_json;
        if ((t->name = dup_str(key)) == NULL) {
            rc = SMP_ENOMEM;
            goto free_json;
        }
        out->n_tensors++;
    }
    /* No two tensors share data bytes. */
    if (out->n_tensors > 1) {
        by_offset = malloc(out->n_tensors * sizeof *by_offset);
        if (by_offset == NULL) {
            rc = SMP_ENOMEM;
            goto free_json;
        }
        for (size_t i = 0; i < out->n_tensors; i++) by_offset[i] = &out->tensors[i];
        qsort(by_offset, out->n_tensors, sizeof *by_offset, cmp_by_offset);
        /* Empty tensors hold no bytes; each other one must start at or after
         * the furthest end seen so far. */
        const wc_st_tensor *reach = NULL;
        for (size_t i = 0; i < out->n_tensors; i++) {
            const wc_st_tensor *b = by_offset[i];
            if (b->bytes == 0) continue;
            if (reach != NULL && reach->offset + reach->bytes > b->offset) {
                wm_errbuf(err, errlen, "safetensors: tensors '%s' and '%s' overlap in the data",
                        reach->name, b->name);
                rc = SMP_EPROTO;
                goto free_order;
            }
            if (reach == NULL || b->offset + b->bytes > reach->offset + reach->bytes) reach = b;
        }
    }
    /* The data ends where the last tensor's does, as the reference reader
     * wants (MetadataIncompleteBuffer): bytes after it are no tensor's, a
     * sign of a file cut from or appended to another. */
    uint64_t end = out->data_start;
    for (size_t i = 0; i < out->n_tensors; i++)
        if (out->tensors[i].offset + out->tensors[i].bytes > end)
            end = out->tensors[i].offset + out->tensors[i].bytes;
    if (end != file_size) {
        wm_errbuf(err, errlen, "safetensors: %llu bytes after the last tensor's data (the "
                "tensors end at byte %llu of the %llu data bytes): a safetensors file ends "
                "with its data", (unsigned long long)(file_size - end),
                (unsigned long long)(end - out->data_start),
                (unsigned long long)(file_size - out->data_start));
        rc = SMP_EPROTO;
        goto free_order;
    }
    qsort(out->tensors, out->n_tensors, sizeof *out->tensors, cmp_by_name);
    rc = SMP_OK;
free_order:
    free(by_offset);
free_json:
    json_decref(root);
    if (rc < 0) wc_st_header_free(out);
    return rc;
}

long wc_st_find(const wc_st_header *h, const char *name)
{
    size_t lo = 0, hi = h->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(h->tensors[mid].name, name);
        if (c == 0) return (long)mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* ---- writing ---------------------------------------------------------------- */

typedef struct entry_ref {
    const char *name;
    size_t idx;
} entry_ref;

static int cmp_entry_ref(const void *a, const void *b)
{
    return strcmp(((const entry_ref *)a)->name, ((const entry_ref *)b)->name);
}

/* Add {"dtype", "shape", "data_offsets"} of e at [begin, end) to root under
 * e's name. SMP_OK, SMP_EINVAL (the name is not UTF-8) or SMP_ENOMEM. */
static int add_entry_json(json_t *root, const wc_st_entry *e, uint64_t begin, uint64_t end)
{
    json_t *obj = json_object(), *shape = json_array(), *offs = json_array();
    if (obj == NULL || shape == NULL || offs == NULL) goto fail;
    for (uint32_t d = 0; d < e->ndim; d++)
        if (json_array_append_new(shape, json_integer((json_int_t)e->shape[d])) < 0) goto fail;
    if (json_array_append_new(offs, json_integer((json_int_t)begin)) < 0 ||
        json_array_append_new(offs, json_integer((json_int_t)end)) < 0)
        goto fail;
    if (json_object_set_new(obj, "dtype", json_string(wc_dtype_name(e->dtype))) < 0) goto fail;
    if (json_object_set_new(obj, "shape", shape) < 0) {
        shape = NULL;
        goto fail;
    }
    shape = NULL;
    if (json_object_set_new(obj, "data_offsets", offs) < 0) {
        offs = NULL;
        goto fail;
    }
    offs = NULL;
    /* Fails for a name that is not UTF-8 (jansson frees obj). */
    if (json_object_set_new(root, e->name, obj) < 0) return SMP_EINVAL;
    return SMP_OK;
fail:
    json_decref(obj);
    json_decref(shape);
    json_decref(offs);
    return SMP_ENOMEM;
}

int wc_st_encode_header(const wc_st_entry *entries, size_t n, const wc_st_meta *meta,
                        size_t n_meta, uint8_t **out, size_t *out_len, size_t *order,
                        char *err, size_t errlen)
{
    int rc = SMP_ENOMEM;
    entry_ref *refs = NULL;
    json_t *root = NULL;
    char *text = NULL;

    if (n > 0 && entries == NULL) return SMP_EINVAL;
    refs = malloc((n ? n : 1) * sizeof *refs);
    root = json_object();
    if (refs == NULL || root == NULL) goto free_all;
    for (size_t i = 0; i < n; i++) {
        const wc_st_entry *e = &entries[i];
        uint64_t want;
        if (e->name == NULL || e->name[0] == '\0' || strcmp(e->name, META_KEY) == 0) {
            wm_errbuf(err, errlen, "safetensors: entry %zu has an empty or reserved name", i);
            rc = SMP_EINVAL;
            goto free_all;
        }
        if (wc_dtype_size(e->dtype) == 0 || e->ndim > WC_MAX_NDIM ||
            (e->ndim > 0 && e->shape == NULL)) {
            wm_errbuf(err, errlen, "safetensors: tensor '%s': unknown dtype or rank over %d",
                    e->name, WC_MAX_NDIM);
            rc = SMP_EINVAL;
            goto free_all;
        }
        if (wc_shape_bytes(e->shape, e->ndim, wc_dtype_size(e->dtype), &want) < 0 ||
            want != e->bytes || (e->bytes > 0 && e->data == NULL)) {
            wm_errbuf(err, errlen, "safetensors: tensor '%s': %llu data bytes do not match "
                    "its shape and dtype", e->name, (unsigned long long)e->bytes);
            rc = SMP_EINVAL;
            goto free_all;
        }
        for (uint32_t d = 0; d < e->ndim; d++) {
            if (e->shape[d] > (uint64_t)INT64_MAX) {
                wm_errbuf(err, errlen, "safetensors: tensor '%s': dimension too big for JSON",
                        e->name);
                rc = SMP_ERANGE;
                goto free_all;
            }
        }
        refs[i].name = e->name;
        refs[i].idx = i;
    }
    qsort(refs, n, sizeof *refs, cmp_entry_ref);
    uint64_t at = 0;
    for (size_t k = 0; k < n; k++) {
        const wc_st_entry *e = &entries[refs[k].idx];
        if (k > 0 && strcmp(refs[k - 1].name, e->name) == 0) {
            wm_errbuf(err, errlen, "safetensors: tensor '%s' appears twice", e->name);
            rc = SMP_EINVAL;
            goto free_all;
        }
        if (e->bytes > (uint64_t)INT64_MAX - at) {
            wm_errbuf(err, errlen, "safetensors: data over 2^63 bytes");
            rc = SMP_ERANGE;
            goto free_all;
        }
        if ((rc = add_entry_json(root, e, at, at + e->bytes)) < 0) {
            if (rc == SMP_EINVAL)
                wm_errbuf(err, errlen, "safetensors: tensor name '%s' is not valid UTF-8",
                        e->name);
            goto free_all;
        }
        at += e->bytes;
        if (order) order[k] = refs[k].idx;
    }
    if (n_meta > 0) {
        json_t *m = json_object();
        if (m == NULL || json_object_set_new(root, META_KEY, m) < 0) {
            rc = SMP_ENOMEM;
            goto free_all;
        }
        for (size_t i = 0; i < n_meta; i++) {
            if (meta[i].key == NULL || meta[i].value == NULL) {
                wm_errbuf(err, errlen, "safetensors: metadata %zu has no key or value", i);
                rc = SMP_EINVAL;
                goto free_all;
            }
            if (json_object_set_new(m, meta[i].key, json_string(meta[i].value)) < 0) {
                wm_errbuf(err, errlen, "safetensors: metadata '%s' is not valid UTF-8",
                        meta[i].key);
                rc = SMP_EINVAL;
                goto free_all;
            }
        }
    }
    text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (text == NULL) {
        wm_errbuf(err, errlen, "safetensors: a name is not valid UTF-8");
        rc = SMP_EINVAL;
        goto free_all;
    }
    size_t tl = strlen(text);
    size_t pad = (8 - (8 + tl) % 8) % 8;
    uint64_t hlen = tl + pad;
    uint8_t *buf = malloc(8 + hlen);
    if (buf == NULL) {
        rc = SMP_ENOMEM;
        goto free_all;
    }
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + 8, text, tl);
    memset(buf + 8 + tl, ' ', pad);
    *out = buf;
    *out_len = 8 + hlen;
    rc = SMP_OK;
free_all:
    free(text);
    json_decref(root);
    free(refs);
    return rc;
}

int wc_st_serialize(const wc_st_entry *entries, size_t n, const wc_st_meta *meta,
                    size_t n_meta, uint8_t **out, size_t *out_len, char *err, size_t errlen)
{
    int rc;
    uint8_t *head = NULL, *buf;
    size_t hl, *order = malloc((n ? n : 1) * sizeof *order);
    if (order == NULL) return SMP_ENOMEM;
    rc = wc_st_encode_header(entries, n, meta, n_meta, &head, &hl, order, err, errlen);
    if (rc < 0) goto free_order;
    uint64_t total = hl;
    for (size_t i = 0; i < n; i++) total += entries[i].bytes;
    if (total > SIZE_MAX) {
        rc = SMP_ENOMEM;
        goto free_head;
    }
    buf = malloc((size_t)total);
    if (buf == NULL) {
        rc = SMP_ENOMEM;
        goto free_head;
    }
    memcpy(buf, head, hl);
    size_t at = hl;
    for (size_t k = 0; k < n; k++) {
        const wc_st_entry *e = &entries[order[k]];
        if (e->bytes) memcpy(buf + at, e->data, (size_t)e->bytes);
        at += (size_t)e->bytes;
    }
    *out = buf;
    *out_len = (size_t)total;
    rc = SMP_OK;
free_head:
    free(head);
free_order:
    free(order);
    return rc;
}

/* Write all of len bytes, retrying short writes and EINTR. */
static int write_all(int fd, const uint8_t *p, uint64_t len)
{
    while (len > 0) {
        size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        len -= (uint64_t)w;
    }
    return 0;
}

int wc_st_write_fd(int fd, const wc_st_entry *entries, size_t n, const wc_st_meta *meta,
                   size_t n_meta, char *err, size_t errlen)
{
    int rc;
    uint8_t *head = NULL;
    size_t hl, *order = malloc((n ? n : 1) * sizeof *order);
    if (order == NULL) return SMP_ENOMEM;
    rc = wc_st_encode_header(entries, n, meta, n_meta, &head, &hl, order, err, errlen);
    if (rc < 0) goto free_order;
    if (write_all(fd, head, hl) < 0) goto write_failed;
    for (size_t k = 0; k < n; k++) {
        const wc_st_entry *e = &entries[order[k]];
        if (write_all(fd, e->data, e->bytes) < 0) goto write_failed;
    }
    rc = SMP_OK;
    goto free_head;
write_failed:
    wm_errbuf(err, errlen, "safetensors: write failed: %s", strerror(errno));
    rc = SMP_EIO;
free_head:
    free(head);
free_order:
    free(order);
    return rc;
}

/* ---- mapping a file ------------------------------------------------------------ */

int wc_st_open(const char *path, wc_st_file *out, char *err, size_t errlen)
{
    int rc;
    struct stat st;
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        wm_errbuf(err, errlen, "%s", strerror(errno));
        return SMP_EIO;
    }
    if (fstat(fd, &st) < 0) {
        wm_errbuf(err, errlen, "%s", strerror(errno));
        rc = SMP_EIO;
        goto close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        wm_errbuf(err, errlen, "%s", S_ISDIR(st.st_mode) ? strerror(EISDIR)
                                                          : "not a regular file");
        rc = SMP_EIO;
        goto close_fd;
    }
    if (st.st_size < 8) {
        wm_errbuf(err, errlen, "%lld bytes is too short for a safetensors file",
                (long long)st.st_size);
        rc = SMP_EPROTO;
        goto close_fd;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        wm_errbuf(err, errlen, "mmap: %s", strerror(errno));
        rc = SMP_EIO;
        goto close_fd;
    }
    rc = wc_st_parse(p, (size_t)st.st_size, (uint64_t)st.st_size, &out->header, err, errlen);
    if (rc < 0) {
        munmap(p, (size_t)st.st_size);
        goto close_fd;
    }
    out->base = p;
    out->size = (uint64_t)st.st_size;
close_fd:
    close(fd);
    return rc;
}

void wc_st_close(wc_st_file *f)
{
    if (f == NULL) return;
    if (f->base != NULL) munmap((void *)f->base, (size_t)f->size);
    wc_st_header_free(&f->header);
    memset(f, 0, sizeof *f);
}
