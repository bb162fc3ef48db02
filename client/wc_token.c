/* wc_token.c -- read a credential token from a file (wc_token.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "store_plugin.h"
#include "wc_token.h"
#include "wm_errbuf.h"

int wc_token_read_file(const char *path, char *out, size_t cap, char *err, size_t errlen)
{
    char buf[WC_TOKEN_MAX + 2];
    size_t n;
    int rc = SMP_OK;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        wm_errbuf(err, errlen, "token file %s: %s", path, strerror(errno));
        return SMP_EIO;
    }
    n = fread(buf, 1, sizeof(buf), f);
    if (ferror(f)) {
        wm_errbuf(err, errlen, "token file %s: %s", path, strerror(errno));
        rc = SMP_EIO;
        goto close_file;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
                     buf[n - 1] == '\t'))
        n--;
    if (n == 0 || n > WC_TOKEN_MAX || n >= cap || memchr(buf, '\0', n) != NULL) {
        wm_errbuf(err, errlen, "token file %s: %s", path,
                  n == 0 ? "is empty" : memchr(buf, '\0', n) ? "holds a NUL byte"
                                                             : "is larger than 4096 bytes");
        rc = SMP_EINVAL;
        goto close_file;
    }
    memcpy(out, buf, n);
    out[n] = '\0';
close_file:
    fclose(f);
    return rc;
}
