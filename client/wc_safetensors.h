/* wc_safetensors.h -- reading and writing safetensors files, the import and
 * export format of weightctl put / get.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * JSON -- an object mapping each tensor name to {"dtype", "shape",
 * "data_offsets": [begin, end]} plus an optional "__metadata__" object of
 * string values -- and the data, offsets counted from the end of the header.
 * The parser trusts nothing: every way a header can be wrong (truncated, a
 * length over WC_ST_MAX_HEADER or past the end of the file, bad JSON,
 * duplicate keys, an unknown dtype, a shape whose size is not end - begin,
 * offsets outside the file, overlapping tensors, bytes after the last
 * tensor's data) is an SMP_EPROTO with a message naming the tensor, never a
 * crash; a file of another kind is said to be "not a safetensors file" (its
 * header length past the end, or its header not JSON). Holes between
 * tensors are still tolerated (the reference reader refuses them). The writer emits names in sorted order, data packed in that
 * order, and the JSON padded with spaces so the data starts 8-byte aligned.
 * Dtypes: every name of wc_dtype.h (F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32
 * U16 U8 BOOL F8_E4M3 F8_E5M2). */
#ifndef WC_SAFETENSORS_H
#define WC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"
#include "wc_dtype.h"

/* The largest JSON header accepted (100 MiB, as the reference reader). */
#define WC_ST_MAX_HEADER (100ull << 20)

typedef struct wc_st_tensor {
    char *name;
    wc_dtype dtype;
    uint32_t ndim;
    uint64_t shape[WC_MAX_NDIM];
    uint64_t offset;            /* absolute offset of the data in the file */
    uint64_t bytes;
} wc_st_tensor;

typedef struct wc_st_meta {
    char *key;
    char *value;
} wc_st_meta;

typedef struct wc_st_header {
    uint64_t header_len;        /* JSON bytes after the 8-byte prefix */
    uint64_t data_start;        /* 8 + header_len */
    wc_st_tensor *tensors;      /* sorted by name */
    size_t n_tensors;
    wc_st_meta *meta;           /* "__metadata__", sorted by key */
    size_t n_meta;
} wc_st_header;

/* The JSON length announced by the first 8 bytes of a file of file_size
 * bytes, checked against WC_ST_MAX_HEADER and the file size: how much more a
 * reader must read before wc_st_parse. SMP_OK or SMP_EPROTO. */
int wc_st_header_len(const uint8_t prefix[8],
                     uint64_t file_size,
                     uint64_t *out,
                     char *err,
                     size_t errlen);

/* Parse and validate the header of a file of file_size bytes whose first len
 * bytes are buf (at least the prefix and the whole JSON; the data need not be
 * there). On success *out owns its strings (wc_st_header_free); on failure
 * there is nothing to free. SMP_OK, SMP_EPROTO (with a message) or
 * SMP_ENOMEM. */
int wc_st_parse(const uint8_t *buf,
                size_t len,
                uint64_t file_size,
                wc_st_header *out,
                char *err,
                size_t errlen);

/* Free what wc_st_parse returned and zero it; NULL is a no-op. */
void wc_st_header_free(wc_st_header *h);

/* The index of the tensor called name in h->tensors, or -1. */
long wc_st_find(const wc_st_header *h, const char *name);

/* One tensor to write: bytes must be product(shape) * item size. */
typedef struct wc_st_entry {
    const char *name;
    wc_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;
    const void *data;           /* may be NULL when bytes is 0 */
    uint64_t bytes;
} wc_st_entry;

/* Build the 8-byte prefix and padded JSON header for n entries (and n_meta
 * metadata pairs, may be 0) into *out (malloc'd, caller frees). order[]
 * (n entries, caller-provided, may be NULL) receives the entry indices in the
 * order their data follows the header (sorted by name). SMP_OK, SMP_EINVAL
 * (empty, reserved or duplicate name, unknown dtype, size mismatch, with a
 * message), SMP_ERANGE (a number JSON cannot carry) or SMP_ENOMEM. */
int wc_st_encode_header(const wc_st_entry *entries,
                        size_t n,
                        const wc_st_meta *meta,
                        size_t n_meta,
                        uint8_t **out,
                        size_t *out_len,
                        size_t *order,
                        char *err,
                        size_t errlen);

/* A whole file in memory: header then data. Errors as wc_st_encode_header. */
int wc_st_serialize(const wc_st_entry *entries,
                    size_t n,
                    const wc_st_meta *meta,
                    size_t n_meta,
                    uint8_t **out,
                    size_t *out_len,
                    char *err,
                    size_t errlen);

/* Write a whole file to fd (streaming the data, no copy of it). Errors as
 * wc_st_encode_header, or SMP_EIO when a write fails (errno named in err). */
int wc_st_write_fd(int fd,
                   const wc_st_entry *entries,
                   size_t n,
                   const wc_st_meta *meta,
                   size_t n_meta,
                   char *err,
                   size_t errlen);

/* A file mapped read-only and parsed: tensor i's data is
 * base + header.tensors[i].offset. */
typedef struct wc_st_file {
    wc_st_header header;
    const uint8_t *base;
    uint64_t size;
} wc_st_file;

/* Map path and parse its header. SMP_OK, SMP_EIO (open, stat or mmap
 * failed, or not a regular file: "Is a directory"), SMP_EPROTO (bad
 * header), SMP_ENOMEM; errors leave nothing open. err says the cause, not
 * the path (the caller names it). */
int wc_st_open(const char *path,
               wc_st_file *out,
               char *err,
               size_t errlen);

/* Unmap and free; NULL or zeroed is a no-op. */
void wc_st_close(wc_st_file *f);

#endif /* WC_SAFETENSORS_H */
