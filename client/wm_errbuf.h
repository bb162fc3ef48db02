/* wm_errbuf.h -- formatting a message into a caller's error buffer.
 *
 * The one helper every module with an (err, errlen) out-parameter uses: the
 * host's loader, OpLog and RPC server as well as the client transport. */
#ifndef WM_ERRBUF_H
#define WM_ERRBUF_H

#include <stddef.h>

/* printf into err (NUL-terminated, truncated to errlen). err may be NULL or
 * errlen 0: then nothing is written. */
void wm_errbuf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* WM_ERRBUF_H */
