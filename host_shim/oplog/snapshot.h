/* snapshot.h -- the master's snapshot file: building, durable writing, loading.
 *
 * A snapshot is one file, <dir>/snapshot-<last seq, 20 digits>.snap, holding a
 * header (magic, format version, last included OpLog sequence, section count),
 * named sections and a trailer. Every section is framed with its name, its
 * encoding version, its length and an XXH64 of its bytes, so the host can carry
 * a section no loaded plugin claims verbatim into the next snapshot; the
 * trailer holds the file length and an XXH64 of the whole file, so a truncated
 * or torn file is always detected. The byte layout is described in snapshot.c.
 *
 * Life of a snapshot. The master forks a child off its loop thread
 * (master_snapshot.c); the child creates a snap_builder and fills it: the
 * master's sections, each plugin's (save() writes through an smp_writer into
 * memory) and the carried ones (snap_builder_add_raw). Then snap_write_file()
 * writes a .tmp, fsyncs it, renames it into place, fsyncs the directory and
 * drops snapshots beyond `keep`. At start the
 * master calls snap_load_newest(), which validates the newest file completely
 * before it returns anything, and refuses a damaged newest file rather than
 * falling back to an older one (the log before it may already be truncated).
 *
 * Threading: a builder and an image belong to one thread at a time; nothing
 * here keeps global state. Errors are negative SMP_E* codes. */
#ifndef HOST_SNAPSHOT_H
#define HOST_SNAPSHOT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "store_plugin.h"

#define SNAP_FORMAT_VERSION 1u
#define SNAP_NAME_MAX 64        /* bytes of a section name, printable ASCII */
#define SNAP_SECTIONS_MAX 1024  /* sections in one snapshot */

typedef struct snap_feed snap_feed;

/* One section as a loaded image holds it. data points into the image and is
 * valid until snap_image_free(); it is never NULL (an empty section points to
 * a zero-length buffer). */
typedef struct snap_section {
    char name[SNAP_NAME_MAX + 1];   /* NUL-terminated */
    uint16_t encver;                /* as the section's writer stored it */
    const uint8_t *data;
    size_t len;
    snap_feed *feed;                /* a section handed out while its bytes
                                     * are still read (snap_early.stream):
                                     * snap_feed_wait says how many are in;
                                     * NULL: all of them are */
} snap_section;

typedef struct snap_builder snap_builder;
typedef struct snap_image snap_image;

/* The writer a section's save() writes into: a growable buffer owned by its
 * builder, accepting writes only between begin_section and end_section. */
struct smp_writer {
    snap_builder *owner;
    uint8_t *buf;
    size_t len;
    size_t cap;
    size_t ready;   /* bytes of buf whose pages are mapped (a large buffer's) */
    int open;   /* 1 between begin_section and end_section */
    int err;    /* first failure of a write (sticky), 0 if none */
};

/* The reader a section's load() reads from: borrowed bytes of one section. */
struct smp_reader {
    const uint8_t *data;
    size_t len;
};

/* -- Building (loop thread) ----------------------------------------------- */

/* A new, empty snapshot covering the OpLog up to and including last_seq.
 * NULL when out of memory. */
snap_builder *snap_builder_new(uint64_t last_seq);

/* Free a builder and every section buffer. NULL is a no-op. */
void snap_builder_free(snap_builder *b);

/* Open a section. *w is the builder's writer: writes land in this section
 * until end_section, after which they answer SMP_ESTATE (the pointer itself
 * stays valid until the builder is freed).
 * Returns SMP_OK, SMP_EINVAL (name empty, longer than SNAP_NAME_MAX or not
 * printable ASCII), SMP_EEXIST (the builder already has a section of that
 * name), SMP_ESTATE (another section is open), SMP_ERANGE (SNAP_SECTIONS_MAX
 * reached) or SMP_ENOMEM. On failure nothing changed. */
int snap_builder_begin_section(snap_builder *b,
                               const char *name,    /* copied */
                               uint16_t encver,
                               smp_writer **w);     /* OUT */

/* Close the open section and keep what was written. If any write into it
 * failed, the section is discarded and that error is returned (a section is
 * never kept short); SMP_ESTATE when no section is open. There is no way to
 * drop a section deliberately: a snapshot missing a section would load it as
 * empty, so a caller whose save() fails frees the whole builder instead. */
int snap_builder_end_section(snap_builder *b);

/* Append len bytes to the open section. The signature of
 * smp_host_api.writer_write. Returns SMP_OK, SMP_ESTATE (the writer's section
 * was ended), SMP_EINVAL (buf NULL with len > 0), SMP_ENOMEM or SMP_ERANGE
 * (the section would outgrow size_t); a failure is also remembered and
 * reported again by end_section. */
int snap_writer_write(smp_writer *w, const void *buf, size_t len);

/* Add a whole section from bytes already framed elsewhere -- a carried
 * section from the loaded image. The bytes are copied; the section is written
 * out byte for byte with the given encver. Same errors as begin_section. */
int snap_builder_add_raw(snap_builder *b,
                         const char *name,
                         uint16_t encver,
                         const void *data,      /* copied; NULL only if len 0 */
                         size_t len);

/* -- Writing (any thread but the loop for the sync call) ----------------- */

/* Write the builder durably into dir (which must exist) and return once it
 * is: <dir>/snapshot-<seq>.snap.tmp is created with O_EXCL, written, fsynced,
 * renamed to snapshot-<seq>.snap without replacing anything, and the directory
 * is fsynced. Then leftover .tmp files are gone and only the `keep` newest
 * snapshots remain (failures to delete old ones are not errors). The builder
 * is only read, and still belongs to the caller. One writer per directory at
 * a time: a second one (any process) gets SMP_EBUSY.
 *
 * On success the new file's path is copied into path_out (if not NULL; cap
 * includes the NUL; a too small buffer gets SMP_ERANGE before anything is
 * written). Returns SMP_OK, SMP_EINVAL (keep 0, bad arguments), SMP_ESTATE (a
 * section is still open), SMP_EEXIST (a snapshot at this or a later sequence
 * already exists), SMP_EBUSY, SMP_ENOSPC or SMP_EIO; on failure no new
 * snapshot exists and the .tmp has been removed. */
int snap_write_file(const snap_builder *b,
                    const char *dir,
                    uint32_t keep,
                    char *path_out,     /* OUT, may be NULL */
                    size_t cap);

/* The path snap_write_file gives the snapshot of last_seq in dir, into out
 * (cap bytes with the NUL). SMP_OK, or SMP_ERANGE when it does not fit. */
int snap_file_path(const char *dir, uint64_t last_seq, char *out, size_t cap);

/* -- Loading --------------------------------------------------------------- */

/* Load the newest snapshot-*.snap of dir (the highest sequence in the name).
 * The whole file is mapped read-only, brought in and checked -- magic,
 * format version, header,
 * every section's frame and checksum, lengths, the trailer and the checksum
 * of the whole file, and that the header's sequence matches the file name --
 * before anything is returned. Leftover .tmp files are ignored, and removed
 * unless a writer holds the directory.
 *
 * Returns SMP_OK with *out set; SMP_ENOTFOUND with *out NULL when dir holds
 * no snapshot (the caller starts empty); otherwise *out is NULL and err holds
 * one line naming the file and what is wrong: SMP_EPROTO for a damaged or
 * truncated file (an older snapshot is never used instead), SMP_EIO (dir
 * missing or unreadable), SMP_ENOMEM. err may be NULL. */
int snap_load_newest(const char *dir,
                     snap_image **out,  /* OUT */
                     char *err,
                     size_t errlen);

/* How many bytes of a streamed section are in. The loader's; read it with
 * snap_feed_wait. */
struct snap_feed {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t avail;       /* bytes of the section read so far */
    int ended;          /* no more will come: all are in, or the read stopped */
};

/* Wait until the first upto bytes of the section are in, or until no more
 * will come; returns how many are in -- fewer than upto only when the read
 * of the file stopped (it is then refused: fn(arg, NULL) follows). Any
 * thread. */
size_t snap_feed_wait(snap_feed *f, size_t upto);

/* One section handed out while snap_load_newest_early still reads and checks
 * the rest of the file, so that its loading overlaps the reading. Fill name,
 * fn and arg; the loader keeps state and s. fn(arg, s) is called at most
 * once, on the loading thread, as soon as the section's bytes are read and
 * match the checksums of the header, of every frame up to the section's and
 * of the section itself; s and its bytes are the image's and stay valid
 * until snap_image_free. When the load fails after that, fn(arg, NULL) is
 * called before the bytes are freed: fn must return only once nothing uses
 * s any more (and drop what it built from it, or be sure nothing will use
 * it: the file is refused).
 *
 * With stream set, the section goes out as soon as the header and the frames
 * up to its own are in and match their checksums -- before its body is all
 * read, with s->feed telling how much is: its loading overlaps its own
 * reading. Its bytes are checked against their checksum only once the whole
 * file is in (a mismatch refuses the file: fn(arg, NULL)), so what the
 * section's loader builds meanwhile is from bytes not yet checked, and must
 * stand any bytes and be dropped when the file is refused. A section whose
 * bytes are already all in when its frame is goes out as without stream.
 * snap_early_fini once fn and whatever it started are done with s. */
typedef struct snap_early {
    const char *name;
    void (*fn)(void *arg, const snap_section *s);
    void *arg;
    int stream;         /* hand out before the body is in (s.feed) */
    int state;          /* the loader's: 0 trying, 1 handed out, -1 not */
    snap_section s;     /* the loader's */
    snap_feed feed;     /* the loader's, for s.feed */
    size_t at;          /* the loader's: where s's body starts in the file */
} snap_early;

/* Free what snap_load_newest_early kept in e (the feed of a streamed
 * section). */
void snap_early_fini(snap_early *e);

/* snap_load_newest, handing out early->name early (early NULL: none). */
int snap_load_newest_early(const char *dir,
                           snap_early *early,
                           snap_image **out,
                           char *err,
                           size_t errlen);

/* The sequences of dir's newest snapshot and of the one before it (0: none),
 * from the names alone (nothing is read or removed). SMP_OK, SMP_ENOTFOUND
 * (no snapshot), SMP_EIO, SMP_ENOMEM. */
int snap_newest_two(const char *dir, uint64_t *newest, uint64_t *older);

/* Load and validate one snapshot file, as above (the name is not required to
 * follow the snapshot-<seq>.snap pattern, and then its sequence is not
 * compared). SMP_ENOTFOUND if the file does not exist. */
int snap_load_file(const char *path,
                   snap_image **out,
                   char *err,
                   size_t errlen);

/* Free an image; every snap_section and reader over it becomes invalid.
 * NULL is a no-op. */
void snap_image_free(snap_image *img);

uint64_t snap_image_last_seq(const snap_image *img);
const char *snap_image_path(const snap_image *img);   /* the loaded file */
size_t snap_image_count(const snap_image *img);
/* Sections in file order; NULL past the end. */
const snap_section *snap_image_section_at(const snap_image *img, size_t i);
/* The section called name, or NULL. */
const snap_section *snap_image_section(const snap_image *img, const char *name);

/* Point r at a section's bytes; s NULL gives an empty reader (the section is
 * missing). r borrows from the image. */
void snap_reader_init(smp_reader *r, const snap_section *s);

/* The whole section: the signature of smp_host_api.reader_data. *data is
 * never NULL, even for an empty section. */
void snap_reader_data(smp_reader *r, const uint8_t **data, size_t *len);

#endif /* HOST_SNAPSHOT_H */
