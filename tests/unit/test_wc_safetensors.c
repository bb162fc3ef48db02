/* test_wc_safetensors.c -- safetensors round trips (every dtype, scalars,
 * empty tensors, metadata, in memory and through a file) and the refusal of
 * every malformed header with a clear message: truncation, huge lengths, bad
 * JSON, offsets outside the file, overlaps, unknown dtypes, shape/size
 * mismatches. A bounded loop of random and mutated headers must never crash. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "wc_safetensors.h"

/* A file of the given JSON header (not padded) and data_len zero bytes. */
static uint8_t *make_file(const char *json, uint64_t data_len, size_t *len)
{
    size_t jl = strlen(json);
    *len = 8 + jl + (size_t)data_len;
    uint8_t *buf = calloc(1, *len + 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)jl >> (8 * i));
    memcpy(buf + 8, json, jl);
    return buf;
}

/* The header must be refused with SMP_EPROTO and a message containing needle. */
static void expect_bad(const char *json, uint64_t data_len, const char *needle)
{
    size_t len;
    uint8_t *buf = make_file(json, data_len, &len);
    wc_st_header h;
    char err[512] = "";
    int rc = wc_st_parse(buf, len, len, &h, err, sizeof err);
    free(buf);
    if (rc == SMP_OK) {
        wc_st_header_free(&h);
        fail_msg("accepted: %s", json);
    }
    assert_int_equal(rc, SMP_EPROTO);
    if (strstr(err, needle) == NULL) fail_msg("'%s' does not mention '%s'", err, needle);
}

static void test_round_trip_every_dtype(void **state)
{
    (void)state;
    wc_st_entry e[WC_DTYPE_COUNT_ + 2];
    uint64_t shapes[WC_DTYPE_COUNT_ + 2][3];
    uint8_t *data[WC_DTYPE_COUNT_ + 2];
    char names[WC_DTYPE_COUNT_ + 2][32];
    size_t n = 0;
    for (int d = WC_DTYPE_COUNT_ - 1; d >= 1; d--, n++) {   /* names given unsorted */
        snprintf(names[n], sizeof names[n], "t.%s", wc_dtype_name((wc_dtype)d));
        shapes[n][0] = 3;
        shapes[n][1] = (uint64_t)d;
        e[n].name = names[n];
        e[n].dtype = (wc_dtype)d;
        e[n].ndim = 2;
        e[n].shape = shapes[n];
        e[n].bytes = 3 * (uint64_t)d * wc_dtype_size((wc_dtype)d);
        data[n] = malloc(e[n].bytes);
        for (uint64_t i = 0; i < e[n].bytes; i++) data[n][i] = (uint8_t)(i * 31 + (uint64_t)d);
        e[n].data = data[n];
    }
    /* a scalar and an empty tensor */
    static const double pi = 3.25;
    e[n] = (wc_st_entry){"scalar", WC_DTYPE_F64, 0, NULL, &pi, 8};
    data[n++] = NULL;
    shapes[n][0] = 0;
    shapes[n][1] = 7;
    e[n] = (wc_st_entry){"empty", WC_DTYPE_BF16, 2, shapes[n], NULL, 0};
    data[n++] = NULL;
    wc_st_meta meta[2] = {{"format", "pt"}, {"source", "unit test \xc3\xa4"}};

    uint8_t *file;
    size_t len;
    char err[256] = "";
    assert_int_equal(wc_st_serialize(e, n, meta, 2, &file, &len, err, sizeof err), SMP_OK);
    wc_st_header h;
    assert_int_equal(wc_st_parse(file, len, len, &h, err, sizeof err), SMP_OK);
    assert_int_equal(h.data_start % 8, 0);
    assert_int_equal(file[h.data_start - 1] == ' ' || file[h.data_start - 1] == '}', 1);
    assert_int_equal(h.n_tensors, n);
    assert_int_equal(h.n_meta, 2);
    assert_string_equal(h.meta[1].key, "source");
    assert_string_equal(h.meta[1].value, "unit test \xc3\xa4");
    for (size_t i = 1; i < h.n_tensors; i++)
        assert_true(strcmp(h.tensors[i - 1].name, h.tensors[i].name) < 0);
    uint64_t prev_end = h.data_start;
    for (size_t i = 0; i < n; i++) {
        long k = wc_st_find(&h, e[i].name);
        assert_true(k >= 0);
        const wc_st_tensor *t = &h.tensors[k];
        assert_int_equal(t->dtype, e[i].dtype);
        assert_int_equal(t->ndim, e[i].ndim);
        for (uint32_t d = 0; d < t->ndim; d++) assert_int_equal(t->shape[d], e[i].shape[d]);
        assert_int_equal(t->bytes, e[i].bytes);
        if (t->bytes) assert_memory_equal(file + t->offset, e[i].data, t->bytes);
    }
    for (size_t i = 0; i < h.n_tensors; i++) {          /* data packed in name order */
        assert_int_equal(h.tensors[i].offset, prev_end);
        prev_end += h.tensors[i].bytes;
    }
    assert_int_equal(prev_end, len);
    assert_int_equal(wc_st_find(&h, "nope"), -1);
    wc_st_header_free(&h);

    /* the same through a file: write_fd, then map it */
    char path[] = "/tmp/test_wc_st_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(wc_st_write_fd(fd, e, n, meta, 2, err, sizeof err), SMP_OK);
    close(fd);
    wc_st_file f;
    assert_int_equal(wc_st_open(path, &f, err, sizeof err), SMP_OK);
    assert_int_equal(f.size, len);
    assert_memory_equal(f.base, file, len);
    long k = wc_st_find(&f.header, "scalar");
    assert_memory_equal(f.base + f.header.tensors[k].offset, &pi, 8);
    wc_st_close(&f);
    unlink(path);
    assert_int_equal(wc_st_open(path, &f, err, sizeof err), SMP_EIO);
    assert_string_equal(err, strerror(ENOENT)); /* the cause once: the caller names the path */
    assert_int_equal(wc_st_open("/tmp", &f, err, sizeof err), SMP_EIO);
    assert_string_equal(err, strerror(EISDIR));

    free(file);
    for (size_t i = 0; i < n; i++) free(data[i]);
}

static void test_truncated_and_huge_headers_are_refused(void **state)
{
    (void)state;
    wc_st_header h;
    char err[256];
    const uint8_t four[4] = {2, 0, 0, 0};
    assert_int_equal(wc_st_parse(four, 4, 4, &h, err, sizeof err), SMP_EPROTO);
    assert_non_null(strstr(err, "truncated"));
    assert_int_equal(wc_st_parse(NULL, 0, 0, &h, err, sizeof err), SMP_EPROTO);

    size_t len;
    uint8_t *buf = make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                             4, &len);
    /* the header is cut: the reader has fewer bytes than the length says */
    assert_int_equal(wc_st_parse(buf, 20, len, &h, err, sizeof err), SMP_EPROTO);
    assert_non_null(strstr(err, "truncated header"));
    /* the length runs past the end of the file: a file of another kind */
    assert_int_equal(wc_st_parse(buf, len, 30, &h, err, sizeof err), SMP_EPROTO);
    assert_non_null(strstr(err, "not a safetensors file"));
    assert_non_null(strstr(err, "past the end of the 30-byte file"));
    /* text: its first 8 bytes make a length far past the end, said so (not
     * "over the limit") */
    const char *text = "# weight_mgmt\nA Store Master\n";
    assert_int_equal(wc_st_parse((const uint8_t *)text, strlen(text), strlen(text), &h, err,
                                 sizeof err), SMP_EPROTO);
    assert_non_null(strstr(err, "not a safetensors file"));
    /* a huge length */
    uint8_t huge[16] = {0, 0, 0, 0, 0, 1, 0, 0, '{', '}'};
    assert_int_equal(wc_st_parse(huge, sizeof huge, UINT64_MAX, &h, err, sizeof err),
                     SMP_EPROTO);
    assert_non_null(strstr(err, "limit"));
    uint64_t hl;
    uint8_t max[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(wc_st_header_len(max, UINT64_MAX, &hl, err, sizeof err), SMP_EPROTO);
    assert_int_equal(wc_st_header_len(buf, len, &hl, err, sizeof err), SMP_OK);
    assert_int_equal(hl, len - 12);
    free(buf);
    expect_bad("", 0, "header length 0");
}

static void test_bad_json_is_refused(void **state)
{
    (void)state;
    expect_bad("{\"a\": ", 0, "JSON");
    expect_bad("[1, 2, 3]", 0, "not an object");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "JSON");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, "JSON");
    expect_bad("{\"a\":\"F32\"}", 0, "'a'");
    expect_bad("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "shape");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
               "\"data_offsets\":[0,4]}}", 4, "dimensions");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
               "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8,
               "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}",
               4, "JSON");
    expect_bad("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__");
    expect_bad("{\"__metadata__\":[]}", 0, "__metadata__");
    /* deep nesting is a parse error, not a stack overflow */
    size_t depth = 200000;
    char *deep = malloc(2 * depth + 16);
    strcpy(deep, "{\"a\":");
    size_t at = strlen(deep);
    for (size_t i = 0; i < depth; i++) deep[at++] = '[';
    for (size_t i = 0; i < depth; i++) deep[at++] = ']';
    deep[at++] = '}';
    deep[at] = '\0';
    expect_bad(deep, 0, "JSON");
    free(deep);
    expect_bad("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               "JSON");
}

static void test_bad_tensor_entries_are_refused(void **state)
{
    (void)state;
    /* offsets outside the file */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "outside");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "outside");
    /* overlapping tensors, also across an empty one in between */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
               "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
               "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}", 16, "overlap");
    /* unknown dtype */
    expect_bad("{\"a\":{\"dtype\":\"F12\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "F12");
    expect_bad("{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype");
    /* shape and size disagree */
    expect_bad("{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 8,
               "make 6 bytes");
    expect_bad("{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
               "\"data_offsets\":[0,8]}}", 8, "2^64");

    /* bytes after the last tensor's data: not one whole file */
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 3,
               "1 bytes after the last tensor's data (the tensors end at byte 2 of the 3");
    expect_bad("{}", 1, "1 bytes after the last tensor's data");

    /* holes are tolerated; an empty tensor anywhere is fine */
    size_t len;
    uint8_t *buf = make_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
                             "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[5,5]}}",
                             6, &len);
    wc_st_header h;
    char err[256];
    assert_int_equal(wc_st_parse(buf, len, len, &h, err, sizeof err), SMP_OK);
    assert_int_equal(h.n_tensors, 2);
    wc_st_header_free(&h);
    free(buf);
}

static void test_writer_refusals(void **state)
{
    (void)state;
    uint64_t s[1] = {2};
    uint8_t d[8] = {0};
    wc_st_entry e[2] = {{"x", WC_DTYPE_F32, 1, s, d, 8}, {"x", WC_DTYPE_F32, 1, s, d, 8}};
    uint8_t *out;
    size_t len;
    char err[256];
    assert_int_equal(wc_st_serialize(e, 2, NULL, 0, &out, &len, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "'x' appears twice"));
    e[1].name = "__metadata__";
    assert_int_equal(wc_st_serialize(e, 2, NULL, 0, &out, &len, err, sizeof err), SMP_EINVAL);
    e[1].name = "y";
    e[1].bytes = 7;
    assert_int_equal(wc_st_serialize(e, 2, NULL, 0, &out, &len, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "'y'"));
    e[1].bytes = 8;
    e[1].dtype = WC_DTYPE_INVALID;
    assert_int_equal(wc_st_serialize(e, 2, NULL, 0, &out, &len, err, sizeof err), SMP_EINVAL);
    e[1].dtype = WC_DTYPE_F32;
    e[1].name = "bad\xff";
    assert_int_equal(wc_st_serialize(e, 2, NULL, 0, &out, &len, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "UTF-8"));
    /* an empty file: just "{}" padded */
    assert_int_equal(wc_st_serialize(NULL, 0, NULL, 0, &out, &len, err, sizeof err), SMP_OK);
    assert_int_equal(len, 16);
    wc_st_header h;
    assert_int_equal(wc_st_parse(out, len, len, &h, err, sizeof err), SMP_OK);
    assert_int_equal(h.n_tensors, 0);
    wc_st_header_free(&h);
    free(out);
}

/* Random bytes, and random damage to a valid header, never crash the parser. */
static void test_random_headers_never_crash(void **state)
{
    (void)state;
    static const char alphabet[] = "{}[]\":,0123456789-.eE \\ufF3216BIU8_adtypshpeofs";
    uint64_t shape[2] = {4, 3};
    uint8_t data[48] = {0};
    wc_st_entry e[3] = {{"w", WC_DTYPE_F32, 2, shape, data, 48},
                        {"b", WC_DTYPE_U8, 1, shape, data, 4},
                        {"c", WC_DTYPE_BF16, 1, shape + 1, data, 6}};
    wc_st_meta meta = {"format", "pt"};
    uint8_t *valid;
    size_t vlen;
    assert_int_equal(wc_st_serialize(e, 3, &meta, 1, &valid, &vlen, NULL, 0), SMP_OK);
    uint8_t *buf = malloc(vlen + 256);
    uint32_t seed = 99;
    int ok = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len;
        seed = seed * 1103515245u + 12345u;
        if (iter % 2 == 0) {                 /* damage a valid file */
            memcpy(buf, valid, vlen);
            len = vlen;
            for (int k = 0; k < 1 + iter % 5; k++) {
                seed = seed * 1103515245u + 12345u;
                size_t at = 8 + (seed >> 8) % (vlen - 8);
                buf[at] = (seed & 1) ? (uint8_t)alphabet[(seed >> 16) % (sizeof alphabet - 1)]
                                     : (uint8_t)(seed >> 20);
            }
            if (iter % 10 == 0) buf[(seed >> 4) % 8] ^= (uint8_t)(seed >> 24);
        } else {                             /* random JSON-ish text */
            len = 8 + (seed >> 8) % 200;
            for (size_t k = 8; k < len; k++) {
                seed = seed * 1103515245u + 12345u;
                buf[k] = (uint8_t)alphabet[(seed >> 16) % (sizeof alphabet - 1)];
            }
            uint64_t hl = len - 8 - (seed >> 4) % 4;
            if (hl > len - 8) hl = len - 8;
            for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hl >> (8 * i));
        }
        wc_st_header h;
        char err[256];
        int rc = wc_st_parse(buf, len, len, &h, err, sizeof err);
        if (rc == SMP_OK) {
            ok++;
            wc_st_header_free(&h);
        } else {
            assert_int_equal(rc, SMP_EPROTO);
            assert_true(err[0] != '\0');
        }
    }
    (void)ok;
    free(buf);
    free(valid);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_dtype),
        cmocka_unit_test(test_truncated_and_huge_headers_are_refused),
        cmocka_unit_test(test_bad_json_is_refused),
        cmocka_unit_test(test_bad_tensor_entries_are_refused),
        cmocka_unit_test(test_writer_refusals),
        cmocka_unit_test(test_random_headers_never_crash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
