/* wm_errbuf.c -- see wm_errbuf.h. */
#include <stdarg.h>
#include <stdio.h>

#include "wm_errbuf.h"

void wm_errbuf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errlen == 0) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
