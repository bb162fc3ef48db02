/* fuzz_snapshot.c -- fuzz target: a snapshot file as the master reads it at
 * startup.
 *
 * The first byte says what the rest is, so that mutants reach the section
 * decoders instead of stopping at the file's checksum:
 *   0  a whole snapshot file, loaded with snap_load_file (header, section
 *      frames, checksums, trailer); an accepted file's sections then go
 *      where recovery sends them, as below;
 *   1  the host's objects section, loaded into a fresh obj_store, and its
 *      hand-written decoder held against protobuf-c's unpack (same verdict,
 *      same records: ../unit/obj_snap_same.h);
 *   2  the weight plugin's section, through wm_decode_section and
 *      wm_section_check, and its hand-written decoder held against the
 *      protobuf-c decode it replaced (same status and sentence, same image:
 *      ../unit/wm_section_same.h).
 * Every refusal is fine; a crash, a leak or a sanitizer report is not. An
 * objects section that loads must also load again once saved (abort
 * otherwise: recovery would accept a state it cannot snapshot again).
 *
 * Seeds: snapshots written by snap_write_file from a store holding a
 * segment, objects, a managed group and a pinned object, with and without a
 * weight section and an extra section no plugin claims; and the two sections
 * alone. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "master_internal.h"
#include "obj_store.h"
#include "snapshot.h"
#include "wm_codec.h"

#include "../unit/obj_snap_same.h"
#include "../unit/wm_section_same.h"

#define WEIGHT_SECTION "weight_metadata"

/* Load the host section into a fresh store; when it loads, save it and load
 * the bytes again into another store: both must succeed. */
static void load_objects(const uint8_t *data, size_t len)
{
    obj_store *st = NULL, *again = NULL;
    fuzz_buf saved = {0};
    if (!obj_snap_same(data, len)) abort();
    if (obj_store_create(&st, NULL) < 0) abort();
    if (obj_store_load(st, data, len) == SMP_OK) {
        if (obj_store_save(st, fuzz_buf_write, &saved) < 0 || obj_store_create(&again, NULL) < 0)
            abort();
        if (obj_store_load(again, saved.p, saved.n) != SMP_OK) {
            fprintf(stderr, "fuzz_snapshot: a loaded objects section does not load once saved\n");
            abort();
        }
        obj_store_destroy(again);
    }
    free(saved.p);
    obj_store_destroy(st);
}

static void load_weights(const uint8_t *data, size_t len)
{
    wm_section_image img;
    char msg[256], why[1024];
    if (!wm_section_same(data, len, NULL, why, sizeof(why))) {
        fprintf(stderr, "fuzz_snapshot: the weight section's decoders differ: %s\n", why);
        abort();
    }
    memset(&img, 0, sizeof(img));
    if (wm_decode_section(data, len, &img, msg, sizeof(msg)) == SMP_OK) {
        (void)wm_section_check(&img, msg, sizeof(msg));
        wm_section_image_clear(&img);
    }
}

static void load_file(const uint8_t *data, size_t size)
{
    char path[512], err[512];
    snap_image *img = NULL;
    snprintf(path, sizeof(path), "%s/input.snap", fuzz_scratch());
    if (fuzz_write_file(path, data, size) < 0) abort();
    if (snap_load_file(path, &img, err, sizeof(err)) != SMP_OK) return;
    for (size_t i = 0; i < snap_image_count(img); i++) {
        const snap_section *s = snap_image_section_at(img, i);
        if (strcmp(s->name, MASTER_SECTION_OBJECTS) == 0) load_objects(s->data, s->len);
        else if (strcmp(s->name, WEIGHT_SECTION) == 0) load_weights(s->data, s->len);
    }
    snap_image_free(img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    switch (data[0] % 3) {
    case 0: load_file(data + 1, size - 1); break;
    case 1: load_objects(data + 1, size - 1); break;
    default: load_weights(data + 1, size - 1); break;
    }
    return 0;
}

/* -- seeds ------------------------------------------------------------------ */

/* One seed: the mode byte, then the bytes. */
static int seed_mode(const char *dir, const char *name, uint8_t mode, const uint8_t *p, size_t n)
{
    uint8_t *buf = malloc(n + 1);
    int rc;
    if (buf == NULL) return -1;
    buf[0] = mode;
    memcpy(buf + 1, p, n);
    rc = fuzz_seed(dir, name, buf, n + 1);
    free(buf);
    return rc;
}

static int apply(obj_store *st, obj_record *r, int rc)
{
    if (rc == SMP_OK) rc = obj_apply_record(st, r->type, r->encver, r->buf, r->len);
    obj_record_free(r);
    return rc;
}

static int put(obj_store *st, const char *key, uint64_t size, const char *group, uint64_t now)
{
    obj_put_params p = {key, size, SMP_DATA_WEIGHT, group, "tenant-a", 0, 0, NULL, 0};
    uint8_t sum[32];
    obj_record r = {0};
    memset(sum, 0x5a, sizeof(sum));
    int rc = obj_put_start(st, &p, now, NULL);
    if (rc < 0) return rc;
    return apply(st, &r, obj_prepare_put_end(st, key, sum, now, &r));
}

/* A store worth snapshotting: one segment, loose objects, a managed group
 * with members, a pinned object. */
static int build_store(obj_store *st)
{
    obj_record r = {0};
    int rc = apply(st, &r, obj_prepare_segment_mount(st, "seg-0", "node-a", 1 << 20, &r));
    if (rc == SMP_OK) rc = put(st, "kv/one", 100, NULL, 1000);
    if (rc == SMP_OK) rc = put(st, "kv/two", 4096, NULL, 1001);
    if (rc == SMP_OK) rc = put(st, "w/model/rev1/manifest", 512, "w/model/rev1", 1002);
    if (rc == SMP_OK) rc = put(st, "w/model/rev1/obj-0", 8192, "w/model/rev1", 1003);
    if (rc == SMP_OK) rc = apply(st, &r, obj_prepare_group_managed(st, "w/model/rev1", "weight_mgmt", 1, &r));
    if (rc == SMP_OK) rc = apply(st, &r, obj_prepare_set_pin(st, "kv/one", 1, &r));
    /* a put in flight: saved as an open put */
    obj_put_params open = {"kv/open", 2048, SMP_DATA_KV, "", "tA", 0, 0, NULL, 0};
    if (rc == SMP_OK) rc = obj_put_start(st, &open, 1004, NULL);
    return rc;
}

/* Write a snapshot of st (plus the given extra sections) into the scratch
 * directory and copy it into dir as `name`. */
static int seed_snapshot(const char *dir, const char *name, const obj_store *st,
                         const uint8_t *weights, size_t wlen, int extra)
{
    char sdir[512], path[600];
    snap_builder *b = snap_builder_new(42);
    smp_writer *w = NULL;
    fuzz_buf obj = {0};
    int rc = -1;
    snprintf(sdir, sizeof(sdir), "%s/seed-snap", fuzz_scratch());
    fuzz_empty_dir(sdir);
    if (b == NULL || (mkdir(sdir, 0700) < 0 && errno != EEXIST)) goto out;
    if (obj_store_save(st, fuzz_buf_write, &obj) < 0 ||
        snap_builder_begin_section(b, MASTER_SECTION_OBJECTS, MASTER_SECTION_ENCVER, &w) < 0 ||
        snap_writer_write(w, obj.p, obj.n) < 0 || snap_builder_end_section(b) < 0)
        goto out;
    if (weights != NULL &&
        (snap_builder_begin_section(b, WEIGHT_SECTION, 1, &w) < 0 ||
         snap_writer_write(w, weights, wlen) < 0 || snap_builder_end_section(b) < 0))
        goto out;
    if (extra && (snap_builder_begin_section(b, "someone_elses", 3, &w) < 0 ||
                  snap_writer_write(w, "carried verbatim", 16) < 0 ||
                  snap_builder_end_section(b) < 0))
        goto out;
    if (snap_write_file(b, sdir, 1, path, sizeof(path)) < 0) goto out;
    {
        FILE *f = fopen(path, "rb");
        uint8_t *bytes = malloc(1 << 20);
        size_t n = f && bytes ? fread(bytes, 1, 1 << 20, f) : 0;
        if (f) fclose(f);
        rc = n > 0 ? seed_mode(dir, name, 0, bytes, n) : -1;
        free(bytes);
    }
out:
    free(obj.p);
    snap_builder_free(b);
    return rc;
}

int fuzz_seeds(const char *dir)
{
    obj_store *st = NULL, *empty = NULL;
    wm_section_image img;
    uint8_t *weights = NULL;
    size_t wlen = 0;
    int n = 0, rc;
    memset(&img, 0, sizeof(img));
    img.next_operation_id = 1; /* an empty weight table: ids start at 1 */
    img.next_lease_id = 1;
    if (obj_store_create(&st, NULL) < 0 || obj_store_create(&empty, NULL) < 0 ||
        build_store(st) < 0 || wm_encode_section(&img, &weights, &wlen, NULL, 0) < 0) {
        fprintf(stderr, "fuzz_snapshot: cannot build the seed state\n");
        n = -1;
        goto out;
    }
    if ((rc = seed_snapshot(dir, "empty", empty, NULL, 0, 0)) < 0) goto fail;
    n += rc;
    if ((rc = seed_snapshot(dir, "objects", st, NULL, 0, 0)) < 0) goto fail;
    n += rc;
    if ((rc = seed_snapshot(dir, "objects-weights-extra", st, weights, wlen, 1)) < 0) goto fail;
    n += rc;
    {
        fuzz_buf obj = {0};
        rc = obj_store_save(st, fuzz_buf_write, &obj) < 0
                 ? -1
                 : seed_mode(dir, "section-objects", 1, obj.p, obj.n);
        free(obj.p);
        if (rc < 0) goto fail;
        n += rc;
    }
    if ((rc = seed_mode(dir, "section-weights", 2, weights, wlen)) < 0) goto fail;
    n += rc;
    goto out;
fail:
    n = -1;
out:
    free(weights);
    obj_store_destroy(st);
    obj_store_destroy(empty);
    return n;
}
