/* wm_bytes.c -- a byte count as a person reads it (wm_bytes.h). */
#include "wm_bytes.h"

#include <stdio.h>

void wm_human_bytes(double v, char *out, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", v, unit[i]);
}
