/* fuzz_safetensors.c -- fuzz target: the client's safetensors reader
 * (client/wc_safetensors.h), which weightctl put runs on a file it did not
 * write.
 *
 * The input is a whole file. It goes through the prefix check
 * (wc_st_header_len), the parser on the whole buffer and on the prefix and
 * JSON alone (the data need not be there), and wc_st_open on a copy in the
 * scratch directory; all three must agree. A header that parses must keep
 * what the parser promises (names sorted and found, sizes that match shape
 * and dtype, data inside the file, no two tensors sharing bytes, metadata
 * sorted), must serialize again with the tensors' own data, and that file
 * must parse to the same tensors, data and metadata and serialize to the
 * same bytes (also through wc_st_write_fd). A broken promise is a bug in the
 * reader or writer: the target says which and aborts so the fuzzer keeps the
 * input. Refusals are the expected outcome. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "wc_safetensors.h"

/* A promise was broken: say which and abort so the input is kept. */
static void broken(const char *what, const char *err)
{
    fprintf(stderr, "fuzz_safetensors: %s%s%s\n", what, err && *err ? ": " : "",
            err ? err : "");
    abort();
}

/* ------------------------------------------------------------------------ */
/* Comparing and checking parsed headers                                     */
/* ------------------------------------------------------------------------ */

/* Same tensors (name, dtype, shape, size; offsets too when same_layout) and
 * the same metadata. 1 when equal. */
static int header_equal(const wc_st_header *a, const wc_st_header *b, int same_layout)
{
    if (a->n_tensors != b->n_tensors || a->n_meta != b->n_meta) return 0;
    if (same_layout && (a->header_len != b->header_len || a->data_start != b->data_start))
        return 0;
    for (size_t i = 0; i < a->n_tensors; i++) {
        const wc_st_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->name, y->name) != 0 || x->dtype != y->dtype || x->ndim != y->ndim ||
            x->bytes != y->bytes || memcmp(x->shape, y->shape, x->ndim * sizeof(x->shape[0])) != 0)
            return 0;
        if (same_layout && x->offset != y->offset) return 0;
    }
    for (size_t i = 0; i < a->n_meta; i++)
        if (strcmp(a->meta[i].key, b->meta[i].key) != 0 ||
            strcmp(a->meta[i].value, b->meta[i].value) != 0)
            return 0;
    return 1;
}

/* What wc_st_parse promises of a header it returned for a file of
 * file_size bytes whose prefix announced hlen JSON bytes. */
static void check_header(const wc_st_header *h, uint64_t hlen, uint64_t file_size)
{
    if (h->header_len != hlen || h->data_start != 8 + hlen)
        broken("header_len or data_start disagrees with the prefix", NULL);
    for (size_t i = 0; i < h->n_tensors; i++) {
        const wc_st_tensor *t = &h->tensors[i];
        uint64_t want;
        if (t->name == NULL || t->name[0] == '\0') broken("a tensor has no name", NULL);
        if (i > 0 && strcmp(h->tensors[i - 1].name, t->name) >= 0)
            broken("tensors are not sorted by name, or a name repeats", t->name);
        if (wc_st_find(h, t->name) != (long)i) broken("wc_st_find misses a tensor", t->name);
        if (wc_dtype_size(t->dtype) == 0 || t->ndim > WC_MAX_NDIM)
            broken("a tensor has an unknown dtype or too many dimensions", t->name);
        if (wc_shape_bytes(t->shape, t->ndim, wc_dtype_size(t->dtype), &want) < 0 ||
            want != t->bytes)
            broken("a tensor's size does not match its shape and dtype", t->name);
        if (t->offset < h->data_start || t->offset > file_size ||
            t->bytes > file_size - t->offset)
            broken("a tensor's data lies outside the file's data", t->name);
        for (size_t j = 0; j < i; j++) {
            const wc_st_tensor *u = &h->tensors[j];
            if (t->bytes > 0 && u->bytes > 0 && t->offset < u->offset + u->bytes &&
                u->offset < t->offset + t->bytes)
                broken("two tensors share data bytes", t->name);
        }
    }
    for (size_t i = 0; i < h->n_meta; i++) {
        if (h->meta[i].key == NULL || h->meta[i].value == NULL)
            broken("a metadata pair is incomplete", NULL);
        if (i > 0 && strcmp(h->meta[i - 1].key, h->meta[i].key) >= 0)
            broken("metadata is not sorted by key, or a key repeats", h->meta[i].key);
    }
}

/* ------------------------------------------------------------------------ */
/* Writing a parsed file again                                               */
/* ------------------------------------------------------------------------ */

/* Entries of h pointing at its data in file (which holds all of it). The
 * array is malloc'ed (caller frees); NULL only when out of memory. */
static wc_st_entry *entries_of(const wc_st_header *h, const uint8_t *file)
{
    wc_st_entry *e = malloc((h->n_tensors + 1) * sizeof(*e));
    if (e == NULL) return NULL;
    for (size_t i = 0; i < h->n_tensors; i++) {
        const wc_st_tensor *t = &h->tensors[i];
        e[i].name = t->name;
        e[i].dtype = t->dtype;
        e[i].ndim = t->ndim;
        e[i].shape = t->shape;
        e[i].data = t->bytes > 0 ? file + t->offset : NULL;
        e[i].bytes = t->bytes;
    }
    return e;
}

/* Serialize what h describes of file; it must succeed. *out malloc'ed. */
static void serialize_again(const wc_st_header *h, const uint8_t *file, uint8_t **out,
                            size_t *out_len)
{
    char err[256] = "";
    wc_st_entry *e = entries_of(h, file);
    if (e == NULL) abort();
    if (wc_st_serialize(e, h->n_tensors, h->meta, h->n_meta, out, out_len, err, sizeof(err)) !=
        SMP_OK)
        broken("a parsed file does not serialize again", err);
    free(e);
}

/* Write it once more with wc_st_write_fd into the scratch directory and map
 * it: the same bytes as wc_st_serialize. */
static void expect_write_fd_same(const wc_st_header *h, const uint8_t *file,
                                 const uint8_t *ser, size_t ser_len)
{
    char path[512], err[256] = "";
    wc_st_file f;
    wc_st_entry *e = entries_of(h, file);
    if (e == NULL) abort();
    snprintf(path, sizeof(path), "%s/rewritten.safetensors", fuzz_scratch());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) abort();
    if (wc_st_write_fd(fd, e, h->n_tensors, h->meta, h->n_meta, err, sizeof(err)) != SMP_OK)
        broken("wc_st_write_fd refuses what wc_st_serialize wrote", err);
    close(fd);
    free(e);
    if (wc_st_open(path, &f, err, sizeof(err)) != SMP_OK)
        broken("a file written by wc_st_write_fd does not open", err);
    if (f.size != ser_len || memcmp(f.base, ser, ser_len) != 0)
        broken("wc_st_write_fd and wc_st_serialize write different bytes", NULL);
    wc_st_close(&f);
}

/* The round trip of a file that parsed as h. */
static void round_trip(const wc_st_header *h, const uint8_t *file)
{
    char err[256] = "";
    uint8_t *ser = NULL, *ser2 = NULL;
    size_t ser_len = 0, ser2_len = 0;
    wc_st_header h2;

    serialize_again(h, file, &ser, &ser_len);
    if (wc_st_parse(ser, ser_len, ser_len, &h2, err, sizeof(err)) != SMP_OK)
        broken("a serialized file does not parse", err);
    if (h2.data_start % 8 != 0) broken("serialized data does not start 8-byte aligned", NULL);
    if (!header_equal(h, &h2, 0)) broken("a serialized file parses to other tensors", NULL);
    for (size_t i = 0; i < h->n_tensors; i++)
        if (h->tensors[i].bytes > 0 &&
            memcmp(file + h->tensors[i].offset, ser + h2.tensors[i].offset,
                   h->tensors[i].bytes) != 0)
            broken("a serialized tensor holds other data", h->tensors[i].name);
    serialize_again(&h2, ser, &ser2, &ser2_len);
    if (ser2_len != ser_len || memcmp(ser, ser2, ser_len) != 0)
        broken("serialize -> parse -> serialize changes the file", NULL);
    expect_write_fd_same(&h2, ser, ser, ser_len);
    free(ser2);
    wc_st_header_free(&h2);
    free(ser);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256] = "", err2[256] = "", path[512];
    uint64_t hlen = 0;
    wc_st_header h, part;
    wc_st_file f;

    int hrc = size >= 8 ? wc_st_header_len(data, size, &hlen, err, sizeof(err)) : SMP_EPROTO;
    int rc = wc_st_parse(data, size, size, &h, err, sizeof(err));
    if (rc == SMP_OK && hrc != SMP_OK)
        broken("wc_st_parse accepts a prefix wc_st_header_len refuses", NULL);

    /* The prefix and the JSON alone, with the file's size: the same answer. */
    if (hrc == SMP_OK) {
        int prc = wc_st_parse(data, (size_t)(8 + hlen), size, &part, err2, sizeof(err2));
        if (prc != rc) broken("parsing without the data answers otherwise", err2);
        if (prc == SMP_OK) {
            if (!header_equal(&h, &part, 1)) broken("parsing without the data differs", NULL);
            wc_st_header_free(&part);
        }
    }

    /* The same file mapped from disk: the same answer. */
    snprintf(path, sizeof(path), "%s/input.safetensors", fuzz_scratch());
    if (fuzz_write_file(path, data, size) < 0) abort();
    int orc = wc_st_open(path, &f, err2, sizeof(err2));
    if (size >= 8 && orc != rc) broken("wc_st_open answers otherwise than wc_st_parse", err2);
    if (orc == SMP_OK) {
        if (rc == SMP_OK && !header_equal(&h, &f.header, 1))
            broken("wc_st_open parses another header", NULL);
        wc_st_close(&f);
    }

    if (rc != SMP_OK) return 0;
    check_header(&h, hlen, size);
    round_trip(&h, data);
    wc_st_header_free(&h);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Seeds                                                                     */
/* ------------------------------------------------------------------------ */

/* Serialize n entries (data filled with a pattern by the caller) and write
 * the file as seed `name`. An encoder refusing a seed is a bug of this file. */
static int seed_file(const char *dir, const char *name, const wc_st_entry *e, size_t n,
                     const wc_st_meta *meta, size_t n_meta)
{
    char err[256] = "";
    uint8_t *file = NULL;
    size_t len = 0;
    if (wc_st_serialize(e, n, meta, n_meta, &file, &len, err, sizeof(err)) != SMP_OK) {
        fprintf(stderr, "fuzz_safetensors: seed %s does not serialize: %s\n", name, err);
        abort();
    }
    int rc = fuzz_seed(dir, name, file, len);
    free(file);
    return rc < 0 ? 0 : rc;
}

/* A buffer of bytes with a recognizable pattern. */
static uint8_t *pattern(uint64_t bytes, unsigned salt)
{
    uint8_t *p = malloc(bytes ? bytes : 1);
    if (p == NULL) abort();
    for (uint64_t i = 0; i < bytes; i++) p[i] = (uint8_t)(i * 31 + salt);
    return p;
}

int fuzz_seeds(const char *dir)
{
    int n = 0;
    wc_st_entry e[WC_DTYPE_COUNT_ + 2];
    uint64_t shapes[WC_DTYPE_COUNT_ + 2][WC_MAX_NDIM];
    uint8_t *data[WC_DTYPE_COUNT_ + 2];
    char names[WC_DTYPE_COUNT_ + 2][32];
    size_t k = 0;
    static const double pi = 3.25;
    static const wc_st_meta meta[2] = {{"format", "pt"}, {"source", "fuzz seed \xc3\xa4"}};

    /* Every dtype as a [3, d] matrix, a scalar, an empty tensor, metadata. */
    for (int d = WC_DTYPE_COUNT_ - 1; d >= 1; d--, k++) {
        snprintf(names[k], sizeof(names[k]), "t.%s", wc_dtype_name((wc_dtype)d));
        shapes[k][0] = 3;
        shapes[k][1] = (uint64_t)d;
        e[k].name = names[k];
        e[k].dtype = (wc_dtype)d;
        e[k].ndim = 2;
        e[k].shape = shapes[k];
        e[k].bytes = 3 * (uint64_t)d * wc_dtype_size((wc_dtype)d);
        data[k] = pattern(e[k].bytes, (unsigned)d);
        e[k].data = data[k];
    }
    e[k] = (wc_st_entry){"scalar", WC_DTYPE_F64, 0, NULL, &pi, 8};
    data[k++] = NULL;
    shapes[k][0] = 0;
    shapes[k][1] = 7;
    e[k] = (wc_st_entry){"empty", WC_DTYPE_BF16, 2, shapes[k], NULL, 0};
    data[k++] = NULL;
    n += seed_file(dir, "every-dtype", e, k, meta, 2);
    n += seed_file(dir, "every-dtype-no-meta", e, k, NULL, 0);
    for (size_t i = 0; i < k; i++) free(data[i]);

    /* One tensor-parallel shard of a small decoder. */
    {
        static const uint64_t emb[2] = {16, 8}, q[2] = {8, 8}, norm[1] = {8}, head[2] = {16, 8};
        uint8_t *d0 = pattern(16 * 8 * 2, 1), *d1 = pattern(8 * 8 * 2, 2);
        uint8_t *d2 = pattern(8 * 4, 3), *d3 = pattern(16 * 8 * 2, 4);
        wc_st_entry s[4] = {
            {"model.embed_tokens.weight", WC_DTYPE_BF16, 2, emb, d0, 16 * 8 * 2},
            {"model.layers.0.self_attn.q_proj.weight", WC_DTYPE_BF16, 2, q, d1, 8 * 8 * 2},
            {"model.norm.weight", WC_DTYPE_F32, 1, norm, d2, 8 * 4},
            {"lm_head.weight", WC_DTYPE_F16, 2, head, d3, 16 * 8 * 2},
        };
        n += seed_file(dir, "tp-shard", s, 4, meta, 1);
        free(d0);
        free(d1);
        free(d2);
        free(d3);
    }

    /* A scalar alone; eight dimensions; no tensor at all; metadata alone. */
    {
        wc_st_entry s = {"scalar", WC_DTYPE_F64, 0, NULL, &pi, 8};
        n += seed_file(dir, "scalar", &s, 1, NULL, 0);
        static const uint64_t rank8[8] = {1, 2, 1, 2, 1, 2, 1, 2};
        uint8_t *d = pattern(16, 9);
        wc_st_entry r = {"rank8", WC_DTYPE_U8, 8, rank8, d, 16};
        n += seed_file(dir, "rank8", &r, 1, NULL, 0);
        free(d);
        n += seed_file(dir, "no-tensor", NULL, 0, NULL, 0);
        n += seed_file(dir, "meta-only", NULL, 0, meta, 2);
    }

    /* Only empty tensors: the header is the whole file (wc_st_encode_header). */
    {
        static const uint64_t z1[1] = {0}, z3[3] = {4, 0, 2};
        wc_st_entry z[2] = {{"a.empty", WC_DTYPE_F32, 1, z1, NULL, 0},
                            {"b.empty", WC_DTYPE_I64, 3, z3, NULL, 0}};
        uint8_t *head = NULL;
        size_t hl = 0;
        char err[256] = "";
        if (wc_st_encode_header(z, 2, meta, 1, &head, &hl, NULL, err, sizeof(err)) != SMP_OK) {
            fprintf(stderr, "fuzz_safetensors: seed header-only does not encode: %s\n", err);
            abort();
        }
        n += fuzz_seed(dir, "header-only", head, hl) < 0 ? 0 : 1;
        free(head);
    }
    return n;
}
