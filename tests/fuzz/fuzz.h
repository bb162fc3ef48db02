/* fuzz.h -- what every fuzz target in tests/fuzz/fuzz_*.c provides, and the
 * helpers they share.
 *
 * A target is one parser or decoder that reads bytes the project does not
 * control: a file on disk (OpLog segment, snapshot, config, safetensors), a
 * record replayed from the log, a message from the network. It defines
 *
 *   LLVMFuzzerTestOneInput(data, size): feed one input; it must return 0 and
 *     may only fail by crashing, leaking or tripping a sanitizer -- a refused
 *     input is the expected outcome, not a failure;
 *   fuzz_seeds(dir): write valid inputs made by the project's own encoders
 *     into dir, so mutation starts from inputs that reach deep code.
 *
 * Linked with driver.c (the default build, `make test`): seeds plus a fixed
 * number of deterministic mutations of every input given. Linked with
 * libFuzzer (`make fuzz`, clang): coverage-guided, for as long as asked. */
#ifndef WM_FUZZ_H
#define WM_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fuzz_seeds(const char *dir);

/* A scratch directory private to this process, made on first use and
 * removed with everything in it at exit. Aborts if it cannot be made. */
const char *fuzz_scratch(void);

/* Write size bytes to path (created or truncated). 0 or -1. */
int fuzz_write_file(const char *path, const uint8_t *data, size_t size);

/* Write one seed: dir/name. 1 (one seed written) or -1. */
int fuzz_seed(const char *dir, const char *name, const uint8_t *data, size_t size);

/* A growable byte buffer; fuzz_buf_write has the signature of the
 * project's write callbacks (obj_store_save): 0, or SMP_ENOMEM. Free p. */
typedef struct fuzz_buf {
    uint8_t *p;
    size_t n, cap;
} fuzz_buf;
int fuzz_buf_write(void *buf, const void *data, size_t len);

/* Remove every entry of dir (not dir itself). */
void fuzz_empty_dir(const char *dir);

#endif /* WM_FUZZ_H */
