/* wc_xxh3.h -- XXH3 for the client's chunk sums, through libxxhash's
 * run-time dispatch on x86-64: its AVX2/AVX-512 code where the CPU has it
 * (about twice the rate of the SSE2 build libxxhash exports by default;
 * the sums are the same on every path). Include this instead of
 * <xxhash.h>: XXH3_64bits and XXH3_64bits_update then name the dispatching
 * functions. */
#ifndef WC_XXH3_H
#define WC_XXH3_H

#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif

#endif /* WC_XXH3_H */
