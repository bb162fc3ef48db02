/* weight_model.h -- a small model of F32 tensors that integration tests
 * publish with libweightclient and read back, compared by SHA-256, plus the
 * /metrics and weightctl probes those tests share.
 *
 * A test declares its tensors (names, 2-d shapes, 4 KiB of bytes each,
 * filled however it likes) and hands the array to these helpers; a failed
 * call fails the running cmocka test naming the cause. Only tests link this
 * (the test_harness library). */
#ifndef TEST_WEIGHT_MODEL_H
#define TEST_WEIGHT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "harness.h"
#include "weightclient.h"

typedef struct wx_tensor {
    const char *name;
    uint64_t shape[2];
    uint8_t data[4096]; /* shape[0] * shape[1] F32 values */
} wx_tensor;

/* Fill the n tensors' bytes with a pattern of seed (tests with different
 * seeds publish different bytes). */
void wx_model_fill(wx_tensor *t, size_t n, unsigned seed);

/* A store on m for tenant "acme" with 4 KiB payload objects (fails the test
 * when it cannot be opened). */
weight_store *wx_open_store(const hx_master *m);

/* Publish the n tensors as id: HOT, MANUAL (only explicit migrations move
 * it), READY at once. */
void wx_put_model(weight_store *s, const weight_identity *id, const wx_tensor *t, size_t n);

/* Poll (up to 30 s) until id is in availability av (and residency res
 * when >= 0) with no active operation; returns its metadata (fails the
 * test naming what it is instead). */
weight_metadata wx_wait_state(weight_store *s, const weight_identity *id, int av, int res);

/* Migrate id (READY first) to target and wait until the operation ended
 * SUCCEEDED and the revision is READY there. */
void wx_migrate_and_wait(weight_store *s, const weight_identity *id, weight_residency target);

/* Start m (named name for its data dir) on binary (NULL: store_master)
 * with its embedded node's 8 MiB segment under the data dir, HOT as the
 * default residency and weight_mgmt.so, whose config block is plugin_cfg
 * (lines indented by six spaces; NULL: none); open *s on it and publish the
 * n tensors as llm/x/v1@1 (*id). 0, or -1 with everything it started
 * stopped and removed: cmocka runs no teardown after a setup that failed. */
int wx_start_published(hx_master *m, const char *name, const char *binary, const char *plugin_cfg,
                       const wx_tensor *t, size_t n, weight_store **s, weight_identity *id);

/* A master with one revision published (wx_start_published): the fixture
 * of the tests that act on it. */
typedef struct wx_published {
    hx_master m;
    weight_store *s;
    weight_identity id;
} wx_published;

/* A cmocka setup's fixture: the n tensors filled from seed
 * (wx_model_fill) and published by wx_start_published (same arguments) into
 * a new wx_published. NULL when it could not be started (nothing left). */
wx_published *wx_published_new(const char *name, const char *binary, const char *plugin_cfg,
                               wx_tensor *t, size_t n, unsigned seed);

/* Close the store, stop and remove the master, free f (NULL: nothing). */
void wx_published_free(wx_published *f);

/* weight_get of the whole revision (every tensor replicated); each tensor's
 * SHA-256 must be that of t's bytes. Returns the bytes copied from mapped
 * memory replicas (the rest came from cold files or the network). */
uint64_t wx_get_and_compare(weight_store *s, const weight_identity *id, const wx_tensor *t, size_t n);

/* wx_get_and_compare, with the get's statistics in *st. */
void wx_get_and_compare_stats(weight_store *s, const weight_identity *id, const wx_tensor *t,
                              size_t n, weight_get_stats *st);

/* The value of the /metrics line starting with `series ` (-1: none). */
long long wx_metric(const hx_master *m, const char *series);

/* Run build/bin/weightctl --master <m's socket> ARGS (stderr too) into out;
 * returns its exit status. */
int wx_weightctl(const hx_master *m, char *out, size_t cap, const char *args);

#endif /* TEST_WEIGHT_MODEL_H */
