/* wc_token.h -- reading a credential token from a file (weightctl and
 * store_node --token-file, the master's auth.node_token_file).
 *
 * A token file holds the token's bytes; trailing whitespace (the newline an
 * editor or `echo` adds) is not part of it. The file is read whole; a file
 * that is empty, larger than WC_TOKEN_MAX bytes or holds a NUL is refused. */
#ifndef WC_TOKEN_H
#define WC_TOKEN_H

#include <stddef.h>

#define WC_TOKEN_MAX 4096

/* Read the token of path into out (cap bytes, NUL-terminated; cap >
 * WC_TOKEN_MAX is enough). Returns 0, or a negative SMP_E* code (SMP_EIO
 * the file cannot be read, SMP_EINVAL empty, too large or with a NUL) with
 * err naming the file and the cause. */
int wc_token_read_file(const char *path, char *out, size_t cap, char *err, size_t errlen);

#endif /* WC_TOKEN_H */
