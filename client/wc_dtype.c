/* wc_dtype.c -- the dtype table (names and item sizes) and the overflow-checked
 * size of a box. See wc_dtype.h. */
#include "wc_dtype.h"

#include <string.h>

#include "store_plugin.h"

static const struct {
    const char *name;
    uint32_t size;
} dtype_table[WC_DTYPE_COUNT_] = {
    [WC_DTYPE_INVALID] = {"?", 0},
    [WC_DTYPE_F64] = {"F64", 8},
    [WC_DTYPE_F32] = {"F32", 4},
    [WC_DTYPE_F16] = {"F16", 2},
    [WC_DTYPE_BF16] = {"BF16", 2},
    [WC_DTYPE_I64] = {"I64", 8},
    [WC_DTYPE_I32] = {"I32", 4},
    [WC_DTYPE_I16] = {"I16", 2},
    [WC_DTYPE_I8] = {"I8", 1},
    [WC_DTYPE_U64] = {"U64", 8},
    [WC_DTYPE_U32] = {"U32", 4},
    [WC_DTYPE_U16] = {"U16", 2},
    [WC_DTYPE_U8] = {"U8", 1},
    [WC_DTYPE_BOOL] = {"BOOL", 1},
    [WC_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [WC_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
};

wc_dtype wc_dtype_from_name(const char *name, size_t len)
{
    if (name == NULL) return WC_DTYPE_INVALID;
    for (int d = 1; d < WC_DTYPE_COUNT_; d++) {
        const char *n = dtype_table[d].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) return (wc_dtype)d;
    }
    return WC_DTYPE_INVALID;
}

const char *wc_dtype_name(wc_dtype d)
{
    if ((int)d <= 0 || (int)d >= WC_DTYPE_COUNT_) return "?";
    return dtype_table[d].name;
}

uint32_t wc_dtype_size(wc_dtype d)
{
    if ((int)d <= 0 || (int)d >= WC_DTYPE_COUNT_) return 0;
    return dtype_table[d].size;
}

int wc_shape_bytes(const uint64_t *shape, uint32_t ndim, uint32_t item_size, uint64_t *out)
{
    uint64_t n = item_size;
    for (uint32_t d = 0; d < ndim; d++) {
        if (shape[d] != 0 && n > UINT64_MAX / shape[d]) {
            /* An overflow only matters when no later dimension is zero. */
            for (uint32_t z = d; z < ndim; z++)
                if (shape[z] == 0) { *out = 0; return SMP_OK; }
            return SMP_ERANGE;
        }
        n *= shape[d];
    }
    *out = n;
    return SMP_OK;
}
