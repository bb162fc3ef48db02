/* wc_dtype.h -- the element types a weight revision can hold.
 *
 * One table shared by the manifest (which stores the name and item size of
 * each tensor's dtype) and the safetensors reader and writer (which use the
 * same names). Names are safetensors' ("BF16", "F8_E4M3"); a name this build
 * does not know is refused everywhere rather than guessed at. */
#ifndef WC_DTYPE_H
#define WC_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum wc_dtype {
    WC_DTYPE_INVALID = 0,
    WC_DTYPE_F64,
    WC_DTYPE_F32,
    WC_DTYPE_F16,
    WC_DTYPE_BF16,
    WC_DTYPE_I64,
    WC_DTYPE_I32,
    WC_DTYPE_I16,
    WC_DTYPE_I8,
    WC_DTYPE_U64,
    WC_DTYPE_U32,
    WC_DTYPE_U16,
    WC_DTYPE_U8,
    WC_DTYPE_BOOL,
    WC_DTYPE_F8_E4M3,
    WC_DTYPE_F8_E5M2,
    WC_DTYPE_COUNT_
} wc_dtype;

/* The most dimensions a tensor may have here (safetensors has no limit; real
 * weights use at most five). Deeper tensors are refused with SMP_EINVAL. */
#define WC_MAX_NDIM 8

/* The dtype named name (exact, case-sensitive; len bytes, not necessarily
 * NUL-terminated), or WC_DTYPE_INVALID. */
wc_dtype wc_dtype_from_name(const char *name, size_t len);

/* The safetensors name of d ("BF16"); "?" for an invalid value. */
const char *wc_dtype_name(wc_dtype d);

/* Bytes per element of d (1, 2, 4 or 8); 0 for an invalid value. */
uint32_t wc_dtype_size(wc_dtype d);

/* Number of elements of a box: the product of shape[0..ndim) (1 when ndim is
 * 0). Returns 0 and sets *out, or SMP_ERANGE when the product, or the product
 * times item_size, overflows 64 bits. With item_size > 0, *out is in bytes. */
int wc_shape_bytes(const uint64_t *shape,
                   uint32_t ndim,
                   uint32_t item_size,     /* 1 for an element count */
                   uint64_t *out);         /* OUT */

#endif /* WC_DTYPE_H */
