/* wm_bytes.h -- a byte count as a person reads it ("8.0 KiB", "1.5 GiB").
 *
 * One rendering for weightctl's tables and the master's log lines, so that
 * a size reads the same in both. */
#ifndef WM_BYTES_H
#define WM_BYTES_H

#include <stddef.h>

/* v bytes into out[cap]: "N B" under 1 KiB, else one decimal and the
 * largest binary unit up to TiB that keeps the figure at or above 1. */
void wm_human_bytes(double v, char *out, size_t cap);

#endif /* WM_BYTES_H */
