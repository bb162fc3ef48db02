/* wm_section_same.h -- the weight plugin's `weight_metadata` section decoded
 * by hand (weight_plugin/wm_section_decode.c) held against the protobuf-c
 * decode it replaced, kept here as the reference: the whole section unpacked
 * by wmrec__weight_metadata_section__unpack, then the same
 * per-record checks (wm_codec_dec.h) in the same order. For the same bytes
 * both must give the same status and sentence, and on success the same
 * image, field by field -- the hand decoder both into its own arrays
 * (wm_decode_section) and into a caller's storage (wm_decode_section_placed).
 * Shared by test_wm_section_decode and fuzz_snapshot. */
#ifndef WM_SECTION_SAME_H
#define WM_SECTION_SAME_H

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_records.pb-c.h"
#include "wm_bulk.h"
#include "wm_codec.h"
#include "wm_codec_dec.h"

/* The reference: the protobuf-c decode of a section, as
 * wm_decode_section_placed was before it was decoded by hand. */
static int wm_pb_decode_section(const uint8_t *buf, size_t len, const wm_section_place *place,
                                wm_section_image *out, char *msg, size_t cap)
{
    int rc = WM_OK;
    char why[256];
    wm_section_image img;
    Wmrec__WeightMetadataSection *m;

    if (out == NULL || (buf == NULL && len > 0)) return WM_EINVALID_ARGUMENT;
    memset(&img, 0, sizeof(img));
    if (len == 0) {
        img.next_operation_id = 1;
        img.next_lease_id = 1;
        *out = img;
        return WM_OK;
    }
    m = wmrec__weight_metadata_section__unpack(NULL, len, buf);
    if (m == NULL) return wm_fail(SMP_EPROTO, msg, cap, "section %s does not decode", WM_SECTION_NAME);
    if (m->format != WM_SECTION_FORMAT) {
        rc = wm_fail(SMP_EPROTO, msg, cap, "section %s has format %" PRIu32 ", this build reads %d",
                     WM_SECTION_NAME, m->format, WM_SECTION_FORMAT);
        goto free_message;
    }
    size_t keys_len = 1;
    for (size_t i = 0; i < m->n_revisions; i++)
        if (m->revisions[i] != NULL) keys_len += wm_dec_keys_len(m->revisions[i]->revision);
    if (place != NULL) {
        char *first = place->alloc(place->ctx, m->n_revisions, keys_len, &img.keys);
        if (first != NULL) {
            img.revisions = (wm_revision *)(first + place->rev_off);
            img.affinities = (wm_affinity *)(first + place->aff_off);
            img.stride = place->stride;
        }
    } else {
        /* Not zeroed: each is written whole by its decode before it is read. */
        img.revisions_len = (m->n_revisions + 1) * sizeof(*img.revisions);
        img.revisions = wm_bulk_alloc(img.revisions_len);
        if (img.revisions == NULL) img.revisions_len = 0;
        img.affinities = calloc(m->n_revisions + 1, sizeof(*img.affinities));
        img.keys = malloc(keys_len);
    }
    img.operations = calloc(m->n_operations + 1, sizeof(*img.operations));
    img.leases = calloc(m->n_leases + 1, sizeof(*img.leases));
    img.lineages = calloc(m->n_lineages + 1, sizeof(*img.lineages));
    size_t strs_len = 1;
    for (size_t i = 0; i < m->n_operations; i++)
        if (m->operations[i] != NULL) strs_len += wm_dec_id_len(m->operations[i]->identity);
    for (size_t i = 0; i < m->n_leases; i++)
        if (m->leases[i] != NULL) strs_len += wm_dec_id_len(m->leases[i]->identity);
    for (size_t i = 0; i < m->n_lineages; i++)
        if (m->lineages[i] != NULL) strs_len += wm_dec_claim_len(m->lineages[i]->claim);
    img.strs = malloc(strs_len);
    char *keys = img.keys, *strs = img.strs;
    if (img.revisions == NULL || img.affinities == NULL || img.operations == NULL ||
        img.leases == NULL || img.lineages == NULL || img.keys == NULL || img.strs == NULL) {
        rc = SMP_ENOMEM;
        goto free_image;
    }
    for (size_t i = 0; i < m->n_revisions; i++) {
        const Wmrec__RevisionEntry *e = m->revisions[i];
        if (e == NULL) {
            rc = wm_fail(SMP_EPROTO, msg, cap, "revision entry %zu is empty", i);
            goto free_image;
        }
        wm_affinity *aff = wm_image_affinity(&img, i);
        memset(aff, 0, sizeof(*aff));
        img.n_revisions = i + 1;
        if ((rc = wm_dec_revision(e->revision, wm_image_revision(&img, i), &keys, msg, cap)) < 0)
            goto free_image;
        if (e->affinity != NULL && (rc = wm_dec_affinity(e->affinity, aff, msg, cap)) < 0)
            goto free_image;
    }
    for (size_t i = 0; i < m->n_operations; i++) {
        if ((rc = wm_dec_operation(m->operations[i], &img.operations[i], &strs, msg, cap)) < 0)
            goto free_image;
        img.n_operations = i + 1;
    }
    for (size_t i = 0; i < m->n_leases; i++) {
        if ((rc = wm_dec_lease(m->leases[i], &img.leases[i], &strs, msg, cap)) < 0)
            goto free_image;
        img.n_leases = i + 1;
    }
    for (size_t i = 0; i < m->n_lineages; i++) {
        if ((rc = wm_dec_lineage_entry(m->lineages[i], &img.lineages[i], &strs, msg, cap)) < 0)
            goto free_image;
        img.n_lineages = i + 1;
    }
    img.next_operation_id = m->next_operation_id;
    img.next_lease_id = m->next_lease_id;
    if ((rc = wm_section_check(&img, why, sizeof(why))) < 0) {
        rc = rc == SMP_ENOMEM ? rc : wm_fail(SMP_EPROTO, msg, cap, "section %s: %s",
                                             WM_SECTION_NAME, why);
        goto free_image;
    }
    /* Checked: each claim is of its entry's lineage, which it now borrows. */
    for (size_t i = 0; i < img.n_lineages; i++) wm_lineage_entry_bind(&img.lineages[i]);
    *out = img;
    wmrec__weight_metadata_section__free_unpacked(m, NULL);
    return WM_OK;
free_image:
    wm_section_image_clear(&img);
free_message:
    wmrec__weight_metadata_section__free_unpacked(m, NULL);
    return rc;
}


/* A difference found, said in why (the first one). */
typedef struct wm_same_ctx {
    char *why;
    size_t cap;
    int same;
} wm_same_ctx;

static void wm_same_differ(wm_same_ctx *c, const char *what, size_t i)
{
    if (c->same && c->why != NULL) snprintf(c->why, c->cap, "%s differs at %zu", what, i);
    c->same = 0;
}

static int wm_same_str(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static int wm_same_id(const wm_identity *a, const wm_identity *b)
{
    return wm_same_str(a->tenant_id, b->tenant_id) && wm_same_str(a->ns, b->ns) &&
           wm_same_str(a->resource_id, b->resource_id) &&
           wm_same_str(a->revision, b->revision) && a->weight_generation == b->weight_generation;
}

/* Same bytes for a double (NaN included). */
static int wm_same_dbl(double a, double b)
{
    return memcmp(&a, &b, sizeof(a)) == 0;
}

static int wm_same_revision(const wm_revision *a, const wm_revision *b)
{
    return wm_same_id(&a->id, &b->id) && a->policy.preferred == b->policy.preferred &&
           wm_same_dbl(a->policy.mixed_hot_ratio, b->policy.mixed_hot_ratio) &&
           a->policy.mode == b->policy.mode && a->availability == b->availability &&
           a->residency == b->residency &&
           wm_same_dbl(a->observed_hot_ratio, b->observed_hot_ratio) &&
           a->metadata_generation == b->metadata_generation &&
           a->operation_id == b->operation_id && wm_same_str(a->group_key, b->group_key) &&
           wm_same_str(a->manifest_key, b->manifest_key) &&
           memcmp(a->manifest_sha256, b->manifest_sha256, WM_SHA256_LEN) == 0 &&
           a->payload_count == b->payload_count && a->logical_bytes == b->logical_bytes &&
           memcmp(a->payload_keys_sha256, b->payload_keys_sha256, WM_SHA256_LEN) == 0 &&
           a->affinity_count == b->affinity_count &&
           memcmp(a->affinity_sha256, b->affinity_sha256, WM_SHA256_LEN) == 0 &&
           a->created_ms == b->created_ms && a->updated_ms == b->updated_ms &&
           a->last_access_ms == b->last_access_ms && a->lease_count == b->lease_count &&
           wm_same_str(a->request_id, b->request_id) &&
           a->request_digest == b->request_digest &&
           a->request_base_generation == b->request_base_generation &&
           a->request_operation_id == b->request_operation_id &&
           a->degraded_from == b->degraded_from &&
           wm_same_dbl(a->degraded_from_hot_ratio, b->degraded_from_hot_ratio);
}

static int wm_same_affinity(const wm_affinity *a, const wm_affinity *b)
{
    if (a->n_units != b->n_units) return 0;
    for (size_t i = 0; i < a->n_units; i++) {
        const wm_affinity_unit *x = &a->units[i], *y = &b->units[i];
        if (x->n_members != y->n_members || x->logical_bytes != y->logical_bytes) return 0;
        for (size_t j = 0; j < x->n_members; j++)
            if (!wm_same_str(x->members[j], y->members[j])) return 0;
    }
    return 1;
}

static int wm_same_operation(const wm_operation *a, const wm_operation *b)
{
    return a->id == b->id && a->kind == b->kind && wm_same_id(&a->id_of, &b->id_of) &&
           a->target == b->target && wm_same_dbl(a->target_hot_ratio, b->target_hot_ratio) &&
           a->members_done == b->members_done && a->members_total == b->members_total &&
           a->bytes_done == b->bytes_done && a->bytes_total == b->bytes_total &&
           strcmp(a->cursor, b->cursor) == 0 && a->state == b->state &&
           strcmp(a->error, b->error) == 0 && a->attempts == b->attempts &&
           a->created_ms == b->created_ms && a->updated_ms == b->updated_ms;
}

static int wm_same_lease(const wm_lease *a, const wm_lease *b)
{
    return a->id == b->id && wm_same_id(&a->id_of, &b->id_of) &&
           a->metadata_generation == b->metadata_generation && a->granted_ms == b->granted_ms &&
           a->expiry_ms == b->expiry_ms;
}

static int wm_same_lineage(const wm_lineage_entry *a, const wm_lineage_entry *b)
{
    const wm_lineage_claim *x = &a->claim, *y = &b->claim;
    if (memcmp(&a->lineage, &b->lineage, sizeof(a->lineage)) != 0 ||
        a->committed_watermark != b->committed_watermark || a->has_claim != b->has_claim)
        return 0;
    if (!a->has_claim) return 1;
    return strcmp(x->request_id, y->request_id) == 0 && wm_same_id(&x->base, &y->base) &&
           wm_same_id(&x->target, &y->target) && x->mode == y->mode && x->phase == y->phase &&
           x->expected_metadata_generation == y->expected_metadata_generation &&
           x->committed_watermark == y->committed_watermark &&
           strcmp(x->error, y->error) == 0 && x->created_ms == y->created_ms &&
           x->updated_ms == y->updated_ms;
}

/* Compare two decoded images field by field. */
static void wm_same_images(wm_same_ctx *c, const wm_section_image *a, const wm_section_image *b)
{
    if (a->n_revisions != b->n_revisions) wm_same_differ(c, "revision count", a->n_revisions);
    if (a->n_operations != b->n_operations) wm_same_differ(c, "operation count", 0);
    if (a->n_leases != b->n_leases) wm_same_differ(c, "lease count", 0);
    if (a->n_lineages != b->n_lineages) wm_same_differ(c, "lineage count", 0);
    if (a->next_operation_id != b->next_operation_id) wm_same_differ(c, "next operation id", 0);
    if (a->next_lease_id != b->next_lease_id) wm_same_differ(c, "next lease id", 0);
    if (!c->same) return;
    for (size_t i = 0; i < a->n_revisions; i++) {
        if (!wm_same_revision(wm_image_revision(a, i), wm_image_revision(b, i)))
            wm_same_differ(c, "revision", i);
        if (!wm_same_affinity(wm_image_affinity(a, i), wm_image_affinity(b, i)))
            wm_same_differ(c, "affinity summary", i);
    }
    for (size_t i = 0; i < a->n_operations; i++)
        if (!wm_same_operation(&a->operations[i], &b->operations[i]))
            wm_same_differ(c, "operation", i);
    for (size_t i = 0; i < a->n_leases; i++)
        if (!wm_same_lease(&a->leases[i], &b->leases[i])) wm_same_differ(c, "lease", i);
    for (size_t i = 0; i < a->n_lineages; i++)
        if (!wm_same_lineage(&a->lineages[i], &b->lineages[i])) wm_same_differ(c, "lineage", i);
}

/* A caller's storage for a placed decode: records of a revision and its
 * summary, and the keys, in one malloc'ed block; each affinity summary in a
 * malloc'ed block of its own (borrowed by the image), listed to be freed. */
typedef struct wm_same_rec {
    wm_revision rev;
    wm_affinity aff;
} wm_same_rec;

typedef struct wm_same_store {
    void *block;
    void **summaries;
    size_t n_summaries;
    size_t cap_summaries;
} wm_same_store;

static void *wm_same_place_alloc(void *ctx, size_t n, size_t keys_len, char **keys)
{
    wm_same_store *st = ctx;
    char *p = malloc(n * sizeof(wm_same_rec) + keys_len);
    if (p == NULL) return NULL;
    st->block = p;
    *keys = p + n * sizeof(wm_same_rec);
    return p;
}

static void *wm_same_place_summary(void *ctx, size_t len)
{
    wm_same_store *st = ctx;
    if (st->n_summaries == st->cap_summaries) {
        size_t nc = st->cap_summaries ? 2 * st->cap_summaries : 16;
        void **v = realloc(st->summaries, nc * sizeof(*v));
        if (v == NULL) return NULL;
        st->summaries = v;
        st->cap_summaries = nc;
    }
    void *p = malloc(len ? len : 1);
    if (p != NULL) st->summaries[st->n_summaries++] = p;
    return p;
}

static void wm_same_store_free(wm_same_store *st)
{
    for (size_t i = 0; i < st->n_summaries; i++) free(st->summaries[i]);
    free(st->summaries);
    free(st->block);
}

/* Decode data[0..len) by hand (into arrays, and placed) and with the
 * reference: 1 when all three agree on the status, the sentence and every
 * field; otherwise 0 with the first difference in why (may be NULL).
 * *rc_out (may be NULL) gets the reference's status. */
static int wm_section_same(const uint8_t *data, size_t len, int *rc_out, char *why, size_t cap)
{
    wm_section_image ref, hand, placed;
    char mref[512] = "", mhand[512] = "", mplaced[512] = "";
    wm_same_store store = {NULL, NULL, 0, 0};
    wm_same_ctx c = {why, cap, 1};
    const wm_section_place place = {wm_same_place_alloc, &store, sizeof(wm_same_rec),
                                    offsetof(wm_same_rec, rev), offsetof(wm_same_rec, aff),
                                    wm_same_place_summary};
    memset(&ref, 0, sizeof(ref));
    memset(&hand, 0, sizeof(hand));
    memset(&placed, 0, sizeof(placed));
    int rr = wm_pb_decode_section(data, len, NULL, &ref, mref, sizeof(mref));
    int rh = wm_decode_section(data, len, &hand, mhand, sizeof(mhand));
    int rp = wm_decode_section_placed(data, len, &place, &placed, mplaced, sizeof(mplaced));
    if (rc_out != NULL) *rc_out = rr;
    if (rr != rh || rr != rp) {
        if (why != NULL) /* each sentence up to 300 bytes: the three fit a why of 1 KiB */
            snprintf(why, cap,
                     "status: reference %d (%.300s), by hand %d (%.300s), placed %d (%.300s)", rr,
                     mref, rh, mhand, rp, mplaced);
        c.same = 0;
    } else if (rr != WM_OK) {
        if (strcmp(mref, mhand) != 0 || strcmp(mref, mplaced) != 0) {
            if (why != NULL)
                snprintf(why, cap,
                         "sentence: reference '%.300s', by hand '%.300s', placed '%.300s'", mref,
                         mhand, mplaced);
            c.same = 0;
        }
    } else {
        wm_same_images(&c, &ref, &hand);
        wm_same_images(&c, &ref, &placed);
    }
    if (rr == WM_OK) wm_section_image_clear(&ref);
    if (rh == WM_OK) wm_section_image_clear(&hand);
    if (rp == WM_OK) wm_section_image_clear(&placed);
    wm_same_store_free(&store);
    return c.same;
}

#endif /* WM_SECTION_SAME_H */
