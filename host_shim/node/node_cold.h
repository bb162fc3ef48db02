/* node_cold.h -- a node's cold tier: durable, verified replica files in one
 * directory (local disk or a DFS mount).
 *
 * A cold replica is one file <dir>/<name>.cold where name is the hex SHA-256
 * of (key, a NUL byte, the content's SHA-256): a name never carries a path
 * component from a key, a new version of a key never overwrites the file of
 * the old one, and persisting the same content twice lands on the same file.
 *
 * File format: a COLD_HEADER_BYTES (4096) header, then the data.
 *   0    8   magic "WMCOLD\0\1"
 *   8    u32 format version (1)            all integers big-endian
 *   12   u32 header bytes (4096)
 *   16   u64 data length
 *   24   32B SHA-256 of the data
 *   56   u16 K: key bytes (1..1024)
 *   58   K   key
 *   ..       zero padding
 *   4088 u64 XXH64 (seed 0) of header bytes 0..4087
 * The header lets an inventory report key, length and checksum without
 * reading the data, and keeps the data page-aligned in the file.
 *
 * Persist writes a temporary file "<name>.<random>.tmp" (O_EXCL), reads every
 * chunk back right after writing it and hashes what it read, fsyncs, and
 * compares the hash with the expected SHA-256; only when they match is the
 * file renamed to its final name and the directory fsynced. On any failure
 * the temporary file is removed and no final file is created, so a final
 * file exists only verified and durable (the replica may be reported
 * COMPLETE). Load verifies the header and the data's SHA-256 before it
 * reports success, so a corrupted file is detected and never served.
 *
 * Every call is blocking disk I/O: a node runs them on worker threads. A
 * cold_tier is immutable after cold_open but for its failed-write counters
 * (atomic, cold_usage_get), so calls on different names may
 * run concurrently; calls on the same name must be serialised by the caller
 * (the master assigns one task per replica at a time). */
#ifndef HOST_NODE_COLD_H
#define HOST_NODE_COLD_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"

#define COLD_HEADER_BYTES 4096
#define COLD_FORMAT_VERSION 1
#define COLD_KEY_MAX 1024
#define COLD_SUFFIX ".cold"
#define COLD_TMP_SUFFIX ".tmp"
#define COLD_NAME_MAX 72 /* 64 hex + ".cold" + NUL, rounded up */

/* Flags of cold_persist. */
#define COLD_VERIFY_FROM_DISK 1u /* after fsync, drop the file's cached pages and
                                    hash it again from the device */

typedef struct cold_tier cold_tier;

/* What a cold file's header says (and, after a deep check, its data). */
typedef struct cold_entry {
    const char *name;      /* "<hex>.cold" */
    const char *key;       /* NULL when status is not SMP_OK */
    uint64_t length;       /* data bytes */
    uint64_t file_bytes;   /* size of the file */
    uint8_t sha256[32];    /* of the data, as recorded in the header */
    int status;            /* SMP_OK, or SMP_EPROTO: bad header, wrong size,
                              or (deep check) data not matching its checksum */
} cold_entry;

/* Called once per cold file; strings are borrowed for the call. A non-zero
 * return stops the scan (returned by cold_inventory). */
typedef int (*cold_visit_fn)(void *arg, const cold_entry *e);

typedef struct cold_inventory_stats {
    uint64_t files;        /* .cold files visited */
    uint64_t bytes;        /* their data bytes (valid ones) */
    uint64_t corrupt;      /* visited with status != SMP_OK */
    uint64_t tmps_removed; /* stale temporary files deleted */
    uint64_t tmp_bytes_removed; /* their sizes */
    uint64_t tmps_kept;    /* temporary files younger than the threshold */
    uint64_t tmps_stale_kept;      /* stale ones left in place (cold_tmp_rule.keep, or
                                      their deletion failed) */
    uint64_t tmp_bytes_stale_kept; /* their sizes */
    uint64_t ignored;      /* other entries (left alone) */
} cold_inventory_stats;

/* A temporary file a walk of the directory found stale (cold_tmp_rule). */
typedef struct cold_stale_tmp {
    const char *name;      /* "<64 hex>.cold.<16 hex>.tmp", borrowed for the call */
    uint64_t bytes;
    uint64_t age_ms;       /* since its last modification */
    int removed;           /* deleted by this walk */
    int error;             /* not kept, yet its deletion failed: the errno (else 0) */
} cold_stale_tmp;

typedef void (*cold_tmp_fn)(void *arg, const cold_stale_tmp *t);

/* What a walk does with the temporary files of persists ("<name>.<16 hex>.tmp"):
 * one at least stale_ms old (0: every one) is stale -- a write that never
 * finished left it -- and deleted unless keep; fn (NULL: none) is told of
 * each stale one, removed or not. Younger ones are left alone (a write may
 * still be under way). */
typedef struct cold_tmp_rule {
    uint64_t stale_ms;
    int keep;              /* report the stale ones, delete nothing */
    cold_tmp_fn fn;
    void *arg;
} cold_tmp_rule;

/* How full the tier is, and how its writes went since cold_open. */
typedef struct cold_usage {
    uint64_t total_bytes;  /* the file system holding the directory (statvfs) */
    uint64_t free_bytes;   /* available to the node (f_bavail) */
    uint64_t used_bytes;   /* in use, as df counts it (f_blocks - f_bfree) */
    int error;             /* fstatvfs failed: its errno (the sizes are then 0) */
    uint64_t write_failures_no_space; /* persist items that failed SMP_ENOSPC (ENOSPC, EDQUOT) */
    uint64_t write_failures_other;    /* ... failed otherwise (I/O, read-back mismatch),
                                         bad arguments not counted */
} cold_usage;

/* Fill *out: the sizes of the directory's file system (through the open
 * directory, where the tier writes) and the failed-write counters. Any
 * thread. */
void cold_usage_get(cold_tier *ct, cold_usage *out);

/* Open (creating one level when missing) the cold directory dir. SMP_OK,
 * SMP_EINVAL, SMP_EIO (cannot create or open: err says why), SMP_ENOMEM. */
int cold_open(const char *dir, cold_tier **out, char *err, size_t errlen);
/* Close the directory. NULL is a no-op. */
void cold_close(cold_tier *ct);
const char *cold_dir(const cold_tier *ct);

/* The file name of the cold replica of key with content sha256 into
 * out[COLD_NAME_MAX]. SMP_OK, SMP_EINVAL (bad key). */
int cold_name_for(const char *key, const uint8_t sha256[32], char out[COLD_NAME_MAX]);

/* "<dir>/<name>" into buf. SMP_OK, SMP_EINVAL (not a cold name), SMP_ERANGE. */
int cold_path_for(const cold_tier *ct, const char *name, char *buf, size_t cap);

/* Accept a bare cold name or a path to a file directly in this tier's
 * directory (as the master records it) and write the bare name into
 * name_out. Anything else -- another directory, "..", a tmp file, a name not
 * of the form <64 hex>.cold -- is SMP_EINVAL. */
int cold_resolve(const cold_tier *ct, const char *name_or_path, char name_out[COLD_NAME_MAX]);

/* Persist len bytes at data (a memory replica of key; borrowed, not changed)
 * as a cold replica whose content must have SHA-256 sha256. On SMP_OK the
 * file is durable, verified, and named name_out (may be NULL). Failures
 * leave no final file and no temporary file: SMP_EINVAL (bad key or
 * arguments), SMP_EPROTO (what was read back does not match sha256: the
 * source replica or the disk is bad), SMP_ENOSPC, SMP_EIO, SMP_ENOMEM; err
 * (may be NULL) names the file and the cause. */
int cold_persist(cold_tier *ct,
                 const char *key,
                 const void *data,
                 uint64_t len,
                 const uint8_t sha256[32],
                 unsigned flags,
                 char name_out[COLD_NAME_MAX],
                 char *err,
                 size_t errlen);

/* One persist of a batch (cold_persist_batch): the arguments of
 * cold_persist, and its result. */
typedef struct cold_item {
    const char *key;            /* borrowed */
    const void *data;           /* borrowed, not changed */
    uint64_t len;
    const uint8_t *sha256;      /* 32 bytes, borrowed */
    int rc;                     /* OUT: what cold_persist would return */
    char name[COLD_NAME_MAX];   /* OUT: the file's name, on SMP_OK */
    char err[320];              /* OUT: the cause, on failure */
} cold_item;

#define COLD_BATCH_MAX 64       /* items of one cold_persist_batch at most */

/* Persist each of items[0..n) as cold_persist would, each item with its own
 * result, and the durable steps shared: the files are written and read back
 * one after the other, fsynced by a few threads at once (the device flushes
 * them together), renamed, and the directory fsynced once for all of them.
 * An item that fails leaves no file and does not stop the others. Returns
 * SMP_OK when every item succeeded, else the first failed item's code;
 * SMP_EINVAL (n 0 or over COLD_BATCH_MAX: nothing done). */
int cold_persist_batch(cold_tier *ct, cold_item *items, size_t n, unsigned flags);

/* cold_stat, and with deep != 0 the data hashed too: a file whose data does
 * not match its header's SHA-256 is SMP_EPROTO (e->status too), as a bad
 * header is; SMP_EIO when it cannot be read. e->length is then the data
 * length either way (what was read). */
int cold_check(const cold_tier *ct,
               const char *name_or_path,
               int deep,
               cold_entry *e,
               char *key_buf,
               char *name_buf);

/* Read and check the header of a cold file (name or path, cold_resolve);
 * e->name and e->key point into buffers the caller provides: key_buf
 * (COLD_KEY_MAX + 1 bytes) and name_buf (COLD_NAME_MAX bytes). Returns
 * SMP_OK (e->status SMP_OK), SMP_ENOTFOUND, SMP_EINVAL, SMP_EPROTO (bad
 * header or size; e->status says so too), SMP_EIO. */
int cold_stat(const cold_tier *ct,
              const char *name_or_path,
              cold_entry *e,
              char *key_buf,
              char *name_buf);

/* Load a cold replica into dst (len bytes; e.g. a newly allocated memory
 * range). key (NULL: not checked) must match the file's key, len its data
 * length, sha256 (NULL: only the file's own checksum) its recorded checksum,
 * and the data must hash to it. Returns SMP_OK only when everything matched;
 * otherwise dst holds garbage that must not be served: SMP_ENOTFOUND,
 * SMP_EINVAL (bad name, other key), SMP_ERANGE (other length), SMP_EPROTO
 * (bad header, truncated, or data not matching: a corrupted file), SMP_EIO. */
int cold_load(const cold_tier *ct,
              const char *name_or_path,
              const char *key,
              void *dst,
              uint64_t len,
              const uint8_t sha256[32],
              char *err,
              size_t errlen);

/* Check that the cold file name_or_path holds exactly the len bytes of key
 * whose SHA-256 is sha256 (both required): header, size, key, length and
 * recorded SHA-256 as cold_load checks them, then every data byte hashed
 * (read in chunks, nothing loaded). Returns SMP_OK or cold_load's errors:
 * SMP_ENOTFOUND, SMP_EINVAL (bad name, other key), SMP_ERANGE (other
 * length), SMP_EPROTO (bad header, other SHA-256, or data not matching it),
 * SMP_EIO, SMP_ENOMEM; err names the file and the cause. */
int cold_verify(const cold_tier *ct,
                const char *name_or_path,
                const char *key,
                uint64_t len,
                const uint8_t sha256[32],
                char *err,
                size_t errlen);

/* Open a cold file (name or path, cold_resolve) for ranged reads of its
 * data: the header and the file size are checked, the data is NOT hashed
 * (that is cold_load's job, or the reader's). On SMP_OK *fd_out is open
 * read-only (the caller closes it), *len_out is the data length, and data
 * byte i is at file offset COLD_HEADER_BYTES + i. Returns SMP_ENOTFOUND,
 * SMP_EINVAL (not a cold name of this tier), SMP_EPROTO (bad header or
 * size), SMP_EIO, SMP_ENOMEM. */
int cold_open_data(const cold_tier *ct,
                   const char *name_or_path,
                   int *fd_out,
                   uint64_t *len_out);

/* Delete a cold file and fsync the directory. SMP_OK, SMP_ENOTFOUND (already
 * gone), SMP_EINVAL (not a cold name of this tier), SMP_EIO (errno then
 * holds the cause the unlink or the fsync met). */
int cold_delete(cold_tier *ct, const char *name_or_path);

/* Scan the directory: visit every .cold file (header checked; with deep != 0
 * the data is hashed too, which reads every byte), delete temporary files
 * older than stale_tmp_ms (0: all of them -- right for a node that just
 * started and so has no persist in progress), leave anything else alone
 * (counted ignored), a directory under a cold file's name included; an
 * entry under a cold name that is not a regular file (a FIFO, a symlink) is
 * visited as corrupt. Fills *st (may be NULL). Returns SMP_OK, the visitor's non-zero value, or
 * SMP_EIO when the directory cannot be read. */
int cold_inventory(cold_tier *ct,
                   uint64_t stale_tmp_ms,
                   int deep,
                   cold_visit_fn fn,
                   void *arg,
                   cold_inventory_stats *st);
/* cold_inventory with the temporary files treated as rule says. */
int cold_inventory_tmps(cold_tier *ct,
                        const cold_tmp_rule *rule,
                        int deep,
                        cold_visit_fn fn,
                        void *arg,
                        cold_inventory_stats *st);

/* The names of the directory's .cold files, sorted bytewise (strcmp), into
 * *names (n of them; cold_names_free frees them), headers not read; the
 * temporary files and directories are treated as cold_inventory treats
 * them. SMP_OK,
 * SMP_EINVAL, SMP_EIO (the directory cannot be read), SMP_ENOMEM. */
int cold_list_names(cold_tier *ct, uint64_t stale_tmp_ms, char ***names, size_t *n);
/* cold_list_names with the temporary files treated as rule says. */
int cold_list_names_tmps(cold_tier *ct, const cold_tmp_rule *rule, char ***names, size_t *n);

/* Delete the temporary files at least stale_ms old (writes that did not
 * finish), reading no .cold file: one pass over the directory's names.
 * Fills *st (tmps_removed and its bytes; those it could not delete count as
 * kept). SMP_OK, SMP_EINVAL, SMP_EIO (the directory cannot be read). */
int cold_sweep_tmps(cold_tier *ct, uint64_t stale_ms, cold_inventory_stats *st);
void cold_names_free(char **names, size_t n);

#endif /* HOST_NODE_COLD_H */
