/* wm_test_table.h -- the baseline weight table that the codec tests and the
 * weight-records fuzzer start from.
 *
 * model-a READY (3 members) with an ended import and a running migration
 * carrying a cursor and an error; model-b READY with one lease and a lineage
 * claim; model-c IMPORTING. wmt_table_image views it as a section image
 * (borrowed: the table must outlive it). */
#ifndef WM_TEST_TABLE_H
#define WM_TEST_TABLE_H

#include <stdlib.h>
#include <string.h>

#include "wm_codec.h"
#include "wm_test_records.h"

typedef struct wmt_table {
    wm_revision rev[3];  /* READY+migrating, DEGRADED leased, IMPORTING */
    wm_affinity aff[3];
    wm_operation ops[2]; /* 1: ended import of rev[0]; 2: running migration */
    wm_lease lease;
    wm_lineage_entry lin;
} wmt_table;

static inline void wmt_table_build(wmt_table *t)
{
    static const uint64_t b0[] = {100, 200, 300};
    static const uint64_t b1[] = {4096};
    memset(t, 0, sizeof(*t));
    wmt_ready_revision(&t->rev[0], &t->aff[0], "model-a", 1, b0, 3);
    wmt_ready_revision(&t->rev[1], &t->aff[1], "model-b", 5, b1, 1);
    wmt_importing_revision(&t->rev[2], "model-c", 2);

    t->ops[0].id = 1;
    t->ops[0].kind = WM_OPK_IMPORTING;
    t->ops[0].id_of = t->rev[0].id;
    t->ops[0].members_total = t->ops[0].members_done = 3;
    t->ops[0].bytes_total = t->ops[0].bytes_done = 600;
    t->ops[0].state = WM_OPS_SUCCEEDED;
    t->ops[0].attempts = 1;
    t->ops[0].created_ms = 1000;
    t->ops[0].updated_ms = 2000;
    wmt_migration(&t->ops[1], &t->rev[0], 2);
    t->ops[1].target = WM_RES_MIXED;
    t->ops[1].target_hot_ratio = 0.5;
    t->ops[1].members_done = 1;
    t->ops[1].bytes_done = 100;
    if (wm_payload_key(&t->rev[0].id, 0, t->ops[1].cursor, sizeof(t->ops[1].cursor)) < 0)
        abort();
    strcpy(t->ops[1].error, "cold write failed on node-2: \xE2\x80\x9C" "disk full\xE2\x80\x9D");
    t->ops[1].attempts = 2;

    wmt_lease(&t->lease, &t->rev[1], 7);
    t->rev[1].lease_count = 1;
    /* DEGRADED, with what survived and where it was before the loss. */
    t->rev[1].availability = WM_AVAIL_DEGRADED;
    t->rev[1].degraded_from = WM_RES_MIXED;
    t->rev[1].degraded_from_hot_ratio = 0.25;

    wm_identity_lineage(&t->rev[1].id, &t->lin.lineage);
    t->lin.committed_watermark = 4;
    t->lin.has_claim = 1;
    wmt_claim(&t->lin.claim, "model-b");
    t->lin.claim.base = t->rev[1].id;
    t->lin.claim.target = t->rev[1].id;
    t->lin.claim.target.weight_generation = 6;
    t->lin.claim.committed_watermark = 4;
}

static inline wm_section_image wmt_table_image(wmt_table *t)
{
    wm_section_image img;
    memset(&img, 0, sizeof(img));
    img.revisions = t->rev;
    img.affinities = t->aff;
    img.n_revisions = 3;
    img.operations = t->ops;
    img.n_operations = 2;
    img.leases = &t->lease;
    img.n_leases = 1;
    img.lineages = &t->lin;
    img.n_lineages = 1;
    img.next_operation_id = 3;
    img.next_lease_id = 8;
    return img;
}

static inline void wmt_table_clear(wmt_table *t)
{
    for (int i = 0; i < 3; i++) wm_affinity_clear(&t->aff[i]);
}

#endif /* WM_TEST_TABLE_H */
