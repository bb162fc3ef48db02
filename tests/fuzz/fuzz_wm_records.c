/* fuzz_wm_records.c -- fuzz target: the weight plugin's OpLog records (types
 * 8-12) and its weight_metadata snapshot section, as replay and snapshot
 * load read them from disk (weight_plugin/wm_codec.h).
 *
 * The first input byte (modulo 6) picks the decoder -- metadata upsert,
 * metadata delete, lease upsert, lease delete, lineage claim, section -- and
 * the rest of the input is its buffer. Whatever decodes must then keep every
 * promise the plugin builds on:
 *   - a section decodes by hand as the protobuf-c decode it replaced does
 *     (same status and sentence, same image: ../unit/wm_section_same.h);
 *   - it passes the pure checks replay and load run after decoding
 *     (wm_metadata_check, wm_operation_check, wm_affinity_check,
 *     wm_lease_check, wm_claim_check, wm_section_check);
 *   - it re-encodes with the matching wm_encode_*, the re-encoding decodes,
 *     and that value encodes to the same bytes again;
 *   - applied to a store loaded from a small valid table (what replay does),
 *     a refused record leaves the store as it was, and an accepted one
 *     leaves a store that saves, and whose saved section loads and saves to
 *     the same bytes; a section that decodes also loads the same way.
 * A broken promise is a bug in the plugin: the target prints what broke and
 * aborts so the fuzzer keeps the input. Refusals are the expected outcome. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "weight_lineage.h"
#include "weight_metadata_store.h"
#include "wm_codec.h"

#include "../unit/wm_section_same.h"
#include "../unit/wm_test_table.h"

/* The decoder a selector byte picks. */
enum {
    SEL_METADATA_UPSERT = 0,
    SEL_METADATA_DELETE = 1,
    SEL_LEASE_UPSERT = 2,
    SEL_LEASE_DELETE = 3,
    SEL_LINEAGE_CLAIM = 4,
    SEL_SECTION = 5,
    SEL_COUNT = 6
};

/* ------------------------------------------------------------------------ */
/* Failure reporting                                                         */
/* ------------------------------------------------------------------------ */

/* A promise of the plugin was broken: say which, with the plugin's sentence
 * (may be empty), and abort so the input is kept. */
static void broken(const char *what, const char *msg)
{
    fprintf(stderr, "fuzz_wm_records: %s%s%s\n", what, msg && *msg ? ": " : "",
            msg ? msg : "");
    abort();
}

static void expect_ok(int rc, const char *what, const char *msg)
{
    char line[256];
    if (rc == WM_OK) return;
    snprintf(line, sizeof(line), "%s (rc %d, %s)", what, rc, wm_error_name(rc));
    broken(line, msg);
}

static void expect_same_bytes(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                              const char *what)
{
    if (alen != blen || (alen > 0 && memcmp(a, b, alen) != 0)) broken(what, NULL);
}

/* ------------------------------------------------------------------------ */
/* The table records are applied to                                          */
/* ------------------------------------------------------------------------ */

/* The baseline table of tests/unit/wm_test_table.h (the codec tests' own)
 * as a saved section, built once (kept to exit). Seeds are records that move
 * this table on. */
static uint8_t *baseline;
static size_t baseline_len;

static void baseline_make(void)
{
    wmt_table t;
    char msg[256] = "";
    uint8_t *enc = NULL;
    size_t enc_len = 0;
    wm_store *st = NULL;
    if (baseline != NULL) return;
    wmt_table_build(&t);
    wm_section_image img = wmt_table_image(&t);
    expect_ok(wm_encode_section(&img, &enc, &enc_len, msg, sizeof(msg)),
              "baseline table does not encode", msg);
    expect_ok(wm_store_create(&st), "wm_store_create", NULL);
    expect_ok(wm_store_load(st, enc, enc_len, msg, sizeof(msg)), "baseline table does not load",
              msg);
    /* Saved by the store itself, so an unchanged store saves these bytes. */
    expect_ok(wm_store_save(st, &baseline, &baseline_len, msg, sizeof(msg)),
              "baseline store does not save", msg);
    wm_store_free(st);
    free(enc);
    wmt_table_clear(&t);
}

/* A fresh store holding the baseline table. */
static wm_store *baseline_store(void)
{
    char msg[256] = "";
    wm_store *st = NULL;
    baseline_make();
    expect_ok(wm_store_create(&st), "wm_store_create", NULL);
    expect_ok(wm_store_load(st, baseline, baseline_len, msg, sizeof(msg)),
              "baseline table does not load", msg);
    return st;
}

/* A store that holds an accepted state must save; its section must load into
 * a fresh store that saves the very same bytes. */
static void expect_store_round_trip(const wm_store *st, const char *after)
{
    char msg[256] = "", what[160];
    uint8_t *s1 = NULL, *s2 = NULL;
    size_t s1_len = 0, s2_len = 0;
    wm_store *again = NULL;

    snprintf(what, sizeof(what), "store does not save after %s", after);
    expect_ok(wm_store_save(st, &s1, &s1_len, msg, sizeof(msg)), what, msg);
    expect_ok(wm_store_create(&again), "wm_store_create", NULL);
    snprintf(what, sizeof(what), "saved store does not load after %s", after);
    expect_ok(wm_store_load(again, s1, s1_len, msg, sizeof(msg)), what, msg);
    snprintf(what, sizeof(what), "reloaded store does not save after %s", after);
    expect_ok(wm_store_save(again, &s2, &s2_len, msg, sizeof(msg)), what, msg);
    snprintf(what, sizeof(what), "save -> load -> save changes the section after %s", after);
    expect_same_bytes(s1, s1_len, s2, s2_len, what);
    free(s2);
    wm_store_free(again);
    free(s1);
}

/* Finish a replay step: an accepted record leaves a store that round-trips;
 * a refused one leaves the baseline untouched. Frees st. */
static void finish_apply(wm_store *st, int rc, const char *record)
{
    char msg[256] = "", what[160];
    if (rc == WM_OK) {
        expect_store_round_trip(st, record);
    } else {
        uint8_t *s = NULL;
        size_t s_len = 0;
        snprintf(what, sizeof(what), "store does not save after a refused %s", record);
        expect_ok(wm_store_save(st, &s, &s_len, msg, sizeof(msg)), what, msg);
        snprintf(what, sizeof(what), "a refused %s changed the store", record);
        expect_same_bytes(baseline, baseline_len, s, s_len, what);
        free(s);
    }
    wm_store_free(st);
}

/* ------------------------------------------------------------------------ */
/* One decoder each                                                          */
/* ------------------------------------------------------------------------ */

static void fuzz_metadata_upsert(const uint8_t *buf, size_t len)
{
    char msg[256] = "";
    wm_metadata_upsert u, u2;
    uint8_t *enc = NULL, *enc2 = NULL;
    size_t enc_len = 0, enc2_len = 0;

    if (wm_decode_metadata_upsert(buf, len, &u, msg, sizeof(msg)) != WM_OK) return;

    /* The checks replay runs on what it decoded, each on its own. */
    expect_ok(wm_metadata_check(&u.revision, msg, sizeof(msg)),
              "decoded upsert fails wm_metadata_check", msg);
    for (size_t i = 0; i < u.n_operations; i++)
        expect_ok(wm_operation_check(&u.operations[i], &u.revision, msg, sizeof(msg)),
                  "decoded upsert operation fails wm_operation_check", msg);
    if (u.has_affinity)
        expect_ok(wm_affinity_check(&u.affinity, &u.revision, msg, sizeof(msg)),
                  "decoded upsert summary fails wm_affinity_check", msg);
    /* The mutation check: creation is pure and may refuse; the same record at
     * the next generation is a mutation the contract allows. */
    (void)wm_metadata_mutation_check(NULL, &u.revision, NULL, 0);
    if (u.revision.metadata_generation < UINT64_MAX) {
        wm_revision next = u.revision;
        next.metadata_generation++;
        expect_ok(wm_metadata_mutation_check(&u.revision, &next, msg, sizeof(msg)),
                  "a decoded revision cannot move to its next generation unchanged", msg);
    }

    wm_store *st = baseline_store();
    finish_apply(st, wm_store_apply_upsert(st, &u, msg, sizeof(msg)), "metadata upsert");

    expect_ok(wm_encode_metadata_upsert(&u, &enc, &enc_len, msg, sizeof(msg)),
              "decoded upsert does not re-encode", msg);
    expect_ok(wm_decode_metadata_upsert(enc, enc_len, &u2, msg, sizeof(msg)),
              "re-encoded upsert does not decode", msg);
    expect_ok(wm_encode_metadata_upsert(&u2, &enc2, &enc2_len, msg, sizeof(msg)),
              "upsert decoded twice does not encode", msg);
    expect_same_bytes(enc, enc_len, enc2, enc2_len, "upsert encoding is not stable");
    free(enc2);
    wm_metadata_upsert_clear(&u2);
    free(enc);
    wm_metadata_upsert_clear(&u);
}

static void fuzz_metadata_delete(const uint8_t *buf, size_t len)
{
    char msg[256] = "";
    wm_metadata_delete d, d2;
    uint8_t *enc = NULL, *enc2 = NULL;
    size_t enc_len = 0, enc2_len = 0;

    if (wm_decode_metadata_delete(buf, len, &d, msg, sizeof(msg)) != WM_OK) return;
    expect_ok(wm_identity_check(&d.id, msg, sizeof(msg)),
              "decoded delete fails wm_identity_check", msg);

    wm_store *st = baseline_store();
    finish_apply(st, wm_store_apply_delete(st, &d, msg, sizeof(msg)), "metadata delete");

    expect_ok(wm_encode_metadata_delete(&d, &enc, &enc_len, msg, sizeof(msg)),
              "decoded delete does not re-encode", msg);
    expect_ok(wm_decode_metadata_delete(enc, enc_len, &d2, msg, sizeof(msg)),
              "re-encoded delete does not decode", msg);
    expect_ok(wm_encode_metadata_delete(&d2, &enc2, &enc2_len, msg, sizeof(msg)),
              "delete decoded twice does not encode", msg);
    expect_same_bytes(enc, enc_len, enc2, enc2_len, "delete encoding is not stable");
    free(enc2);
    wm_metadata_delete_clear(&d2);
    free(enc);
    wm_metadata_delete_clear(&d);
}

static void fuzz_lease_upsert(const uint8_t *buf, size_t len)
{
    char msg[256] = "";
    wm_lease l, l2;
    uint8_t *enc = NULL, *enc2 = NULL;
    size_t enc_len = 0, enc2_len = 0;

    if (wm_decode_lease_upsert(buf, len, &l, wmt_ids_next(), msg, sizeof(msg)) != WM_OK) return;
    expect_ok(wm_lease_check(&l, msg, sizeof(msg)), "decoded lease fails wm_lease_check", msg);

    wm_store *st = baseline_store();
    finish_apply(st, wm_store_apply_lease_upsert(st, &l, msg, sizeof(msg)), "lease upsert");

    expect_ok(wm_encode_lease_upsert(&l, &enc, &enc_len, msg, sizeof(msg)),
              "decoded lease does not re-encode", msg);
    expect_ok(wm_decode_lease_upsert(enc, enc_len, &l2, wmt_ids_next(), msg, sizeof(msg)),
              "re-encoded lease does not decode", msg);
    expect_ok(wm_encode_lease_upsert(&l2, &enc2, &enc2_len, msg, sizeof(msg)),
              "lease decoded twice does not encode", msg);
    expect_same_bytes(enc, enc_len, enc2, enc2_len, "lease encoding is not stable");
    free(enc2);
    free(enc);
}

static void fuzz_lease_delete(const uint8_t *buf, size_t len)
{
    char msg[256] = "";
    wm_lease_delete d, d2;
    uint8_t *enc = NULL, *enc2 = NULL;
    size_t enc_len = 0, enc2_len = 0;

    if (wm_decode_lease_delete(buf, len, &d, wmt_ids_next(), msg, sizeof(msg)) != WM_OK) return;
    expect_ok(wm_identity_check(&d.id_of, msg, sizeof(msg)),
              "decoded lease end fails wm_identity_check", msg);

    wm_store *st = baseline_store();
    finish_apply(st, wm_store_apply_lease_delete(st, &d, msg, sizeof(msg)), "lease delete");

    expect_ok(wm_encode_lease_delete(&d, &enc, &enc_len, msg, sizeof(msg)),
              "decoded lease end does not re-encode", msg);
    expect_ok(wm_decode_lease_delete(enc, enc_len, &d2, wmt_ids_next(), msg, sizeof(msg)),
              "re-encoded lease end does not decode", msg);
    expect_ok(wm_encode_lease_delete(&d2, &enc2, &enc2_len, msg, sizeof(msg)),
              "lease end decoded twice does not encode", msg);
    expect_same_bytes(enc, enc_len, enc2, enc2_len, "lease end encoding is not stable");
    free(enc2);
    free(enc);
}

static void fuzz_lineage_claim(const uint8_t *buf, size_t len)
{
    char msg[256] = "";
    wm_lineage_claim c, c2;
    wm_lineage_entry fresh;
    uint8_t *enc = NULL, *enc2 = NULL;
    size_t enc_len = 0, enc2_len = 0;

    if (wm_decode_lineage_claim(buf, len, &c, wmt_ids_next(), msg, sizeof(msg)) != WM_OK) return;
    expect_ok(wm_claim_check(&c, msg, sizeof(msg)), "decoded claim fails wm_claim_check", msg);

    /* The pure step on a lineage with no entry yet: a claim may start it
     * only at CLAIMED; either way it must not crash. */
    memset(&fresh, 0, sizeof(fresh));
    wm_identity_lineage(&c.base, &fresh.lineage);
    (void)wm_lineage_claim_step(&fresh, &c, NULL, 0);

    wm_store *st = baseline_store();
    finish_apply(st, wm_store_apply_claim(st, &c, msg, sizeof(msg)), "lineage claim");

    expect_ok(wm_encode_lineage_claim(&c, &enc, &enc_len, msg, sizeof(msg)),
              "decoded claim does not re-encode", msg);
    expect_ok(wm_decode_lineage_claim(enc, enc_len, &c2, wmt_ids_next(), msg, sizeof(msg)),
              "re-encoded claim does not decode", msg);
    expect_ok(wm_encode_lineage_claim(&c2, &enc2, &enc2_len, msg, sizeof(msg)),
              "claim decoded twice does not encode", msg);
    expect_same_bytes(enc, enc_len, enc2, enc2_len, "claim encoding is not stable");
    free(enc2);
    free(enc);
}

static void fuzz_section(const uint8_t *buf, size_t len)
{
    char msg[256] = "";
    wm_section_image img, img2;
    uint8_t *enc = NULL, *enc2 = NULL;
    size_t enc_len = 0, enc2_len = 0;
    wm_store *st = NULL;
    char why[1024];

    if (!wm_section_same(buf, len, NULL, why, sizeof(why))) {
        fprintf(stderr, "fuzz_wm_records: the section's decoders differ: %s\n", why);
        abort();
    }
    if (wm_decode_section(buf, len, &img, msg, sizeof(msg)) != WM_OK) return;
    expect_ok(wm_section_check(&img, msg, sizeof(msg)),
              "decoded section fails wm_section_check", msg);

    /* Snapshot load runs the same decode and then builds the tables. */
    expect_ok(wm_store_create(&st), "wm_store_create", NULL);
    expect_ok(wm_store_load(st, buf, len, msg, sizeof(msg)),
              "a section that decodes does not load", msg);
    expect_store_round_trip(st, "loading a section");
    wm_store_free(st);

    expect_ok(wm_encode_section(&img, &enc, &enc_len, msg, sizeof(msg)),
              "decoded section does not re-encode", msg);
    expect_ok(wm_decode_section(enc, enc_len, &img2, msg, sizeof(msg)),
              "re-encoded section does not decode", msg);
    expect_ok(wm_encode_section(&img2, &enc2, &enc2_len, msg, sizeof(msg)),
              "section decoded twice does not encode", msg);
    expect_same_bytes(enc, enc_len, enc2, enc2_len, "section encoding is not stable");
    free(enc2);
    wm_section_image_clear(&img2);
    free(enc);
    wm_section_image_clear(&img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    const uint8_t *buf = data + 1;
    size_t len = size - 1;
    switch (data[0] % SEL_COUNT) {
    case SEL_METADATA_UPSERT: fuzz_metadata_upsert(buf, len); break;
    case SEL_METADATA_DELETE: fuzz_metadata_delete(buf, len); break;
    case SEL_LEASE_UPSERT: fuzz_lease_upsert(buf, len); break;
    case SEL_LEASE_DELETE: fuzz_lease_delete(buf, len); break;
    case SEL_LINEAGE_CLAIM: fuzz_lineage_claim(buf, len); break;
    default: fuzz_section(buf, len); break;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Seeds                                                                     */
/* ------------------------------------------------------------------------ */

/* Write one seed: the selector byte, then the encoding. enc is freed. An
 * encoder that refuses a seed is a bug of this file: abort. */
static int seed_one(const char *dir, const char *name, uint8_t selector, int rc, uint8_t *enc,
                    size_t enc_len, const char *msg)
{
    if (rc != WM_OK) {
        fprintf(stderr, "fuzz_wm_records: seed %s does not encode: %s\n", name, msg);
        abort();
    }
    uint8_t *buf = malloc(enc_len + 1);
    if (buf == NULL) abort();
    buf[0] = selector;
    if (enc_len > 0) memcpy(buf + 1, enc, enc_len);
    int n = fuzz_seed(dir, name, buf, enc_len + 1);
    free(buf);
    free(enc);
    return n < 0 ? 0 : n;
}

#define SEED(name, sel, encoder, value)                                                  \
    do {                                                                                 \
        uint8_t *e_ = NULL;                                                              \
        size_t el_ = 0;                                                                  \
        int rc_ = encoder((value), &e_, &el_, msg, sizeof(msg));                         \
        n += seed_one(dir, (name), (sel), rc_, e_, el_, msg);                            \
    } while (0)

int fuzz_seeds(const char *dir)
{
    int n = 0;
    char msg[256] = "";
    wmt_table t;
    wm_metadata_upsert u;
    wm_revision r;
    wm_operation ops[2];
    wm_affinity aff_d = {0};

    wmt_table_build(&t);

    /* -- type 8: metadata upserts ----------------------------------------- */
    /* model-a as recorded (equal generation: a progress record). */
    memset(&u, 0, sizeof(u));
    u.revision = t.rev[0];
    u.operations = t.ops;
    u.n_operations = 2;
    u.has_affinity = 1;
    u.affinity = t.aff[0];
    SEED("upsert-ready-migrating", SEL_METADATA_UPSERT, wm_encode_metadata_upsert, &u);

    /* model-a's migration ends: MIXED, the operation SUCCEEDED and carried. */
    memset(&u, 0, sizeof(u));
    r = t.rev[0];
    r.metadata_generation = 2;
    r.residency = WM_RES_MIXED;
    r.observed_hot_ratio = 0.5;
    r.operation_id = 0;
    r.updated_ms = 3000;
    ops[0] = t.ops[1];
    ops[0].state = WM_OPS_SUCCEEDED;
    ops[0].members_done = 3;
    ops[0].bytes_done = 600;
    ops[0].error[0] = '\0';
    ops[0].updated_ms = 3000;
    u.revision = r;
    u.operations = ops;
    u.n_operations = 1;
    SEED("upsert-migration-done", SEL_METADATA_UPSERT, wm_encode_metadata_upsert, &u);

    /* model-b: a policy change, no operation, no summary. */
    memset(&u, 0, sizeof(u));
    r = t.rev[1];
    r.metadata_generation = 6;
    r.policy.mode = WM_MODE_PINNED;
    r.policy.preferred = WM_RES_HOT;
    r.updated_ms = 4000;
    u.revision = r;
    SEED("upsert-policy", SEL_METADATA_UPSERT, wm_encode_metadata_upsert, &u);

    /* model-b degraded, then repaired by a running REPAIRING operation. */
    memset(&u, 0, sizeof(u));
    r = t.rev[1];
    r.metadata_generation = 6;
    r.availability = WM_AVAIL_DEGRADED;
    r.operation_id = 3;
    r.updated_ms = 4000;
    memset(&ops[0], 0, sizeof(ops[0]));
    ops[0].id = 3;
    ops[0].kind = WM_OPK_REPAIRING;
    ops[0].id_of = r.id;
    ops[0].target = WM_RES_HOT; /* a repair restores its residency */
    ops[0].members_total = 1;
    ops[0].bytes_total = 4096;
    ops[0].state = WM_OPS_RUNNING;
    ops[0].attempts = 1;
    ops[0].created_ms = 4000;
    ops[0].updated_ms = 4000;
    u.revision = r;
    u.operations = ops;
    u.n_operations = 1;
    SEED("upsert-degraded-repairing", SEL_METADATA_UPSERT, wm_encode_metadata_upsert, &u);

    /* A new import: model-d IMPORTING with its running IMPORTING operation. */
    memset(&u, 0, sizeof(u));
    wmt_importing_revision(&r, "model-d", 1);
    r.operation_id = 4;
    memset(&ops[0], 0, sizeof(ops[0]));
    ops[0].id = 4;
    ops[0].kind = WM_OPK_IMPORTING;
    ops[0].id_of = r.id;
    ops[0].state = WM_OPS_RUNNING;
    ops[0].created_ms = 1000;
    ops[0].updated_ms = 1000;
    u.revision = r;
    u.operations = ops;
    u.n_operations = 1;
    SEED("upsert-new-import", SEL_METADATA_UPSERT, wm_encode_metadata_upsert, &u);

    /* model-c's import commits: READY + HOT with its sealed summary. */
    {
        static const uint64_t bytes[] = {64, 128};
        wm_revision sealed;
        wmt_ready_revision(&sealed, &aff_d, "model-c", 2, bytes, 2);
        sealed.metadata_generation = 2;
        memset(&u, 0, sizeof(u));
        u.revision = sealed;
        u.has_affinity = 1;
        u.affinity = aff_d;
        SEED("upsert-commit", SEL_METADATA_UPSERT, wm_encode_metadata_upsert, &u);
        wm_affinity_clear(&aff_d);
    }

    /* model-c aborted with an empty group: a DELETED + ABSENT tombstone. */
    memset(&u, 0, sizeof(u));
    r = t.rev[2];
    r.metadata_generation = 2;
    r.availability = WM_AVAIL_DELETED;
    r.residency = WM_RES_ABSENT;
    r.updated_ms = 5000;
    u.revision = r;
    SEED("upsert-tombstone", SEL_METADATA_UPSERT, wm_encode_metadata_upsert, &u);

    /* -- type 9: metadata deletes ------------------------------------------ */
    {
        /* model-c's import is forgotten; then model-a with both its operations. */
        uint64_t ids[] = {1, 2};
        wm_metadata_delete d = {t.rev[2].id, 4, WM_DEL_IMPORT_ABORTED, NULL, 0, NULL};
        SEED("delete-import-aborted", SEL_METADATA_DELETE, wm_encode_metadata_delete, &d);
        wm_metadata_delete e = {t.rev[0].id, 1, WM_DEL_TOMBSTONE_EXPIRED, ids, 2, NULL};
        SEED("delete-tombstone", SEL_METADATA_DELETE, wm_encode_metadata_delete, &e);
    }

    /* -- types 10 and 11: leases ------------------------------------------- */
    {
        wm_lease l = t.lease;
        l.expiry_ms = 65000; /* a renewal */
        SEED("lease-renew", SEL_LEASE_UPSERT, wm_encode_lease_upsert, &l);
        wmt_lease(&l, &t.rev[0], 8);
        SEED("lease-grant", SEL_LEASE_UPSERT, wm_encode_lease_upsert, &l);
        wm_lease_delete ld = {7, t.rev[1].id, WM_LEASE_RELEASED};
        SEED("lease-released", SEL_LEASE_DELETE, wm_encode_lease_delete, &ld);
        ld.reason = WM_LEASE_EXPIRED;
        SEED("lease-expired", SEL_LEASE_DELETE, wm_encode_lease_delete, &ld);
    }

    /* -- type 12: lineage claims ------------------------------------------- */
    {
        wm_lineage_claim c = t.lin.claim;
        SEED("claim-duplicate", SEL_LINEAGE_CLAIM, wm_encode_lineage_claim, &c);
        c.phase = WM_PHASE_BASE_FENCED;
        c.updated_ms = 300;
        SEED("claim-base-fenced", SEL_LINEAGE_CLAIM, wm_encode_lineage_claim, &c);
        c.phase = WM_PHASE_ABORTED;
        strcpy(c.error, "target import failed: \xE2\x80\x9Cno space\xE2\x80\x9D");
        SEED("claim-aborted", SEL_LINEAGE_CLAIM, wm_encode_lineage_claim, &c);
        /* A new claim of model-a's lineage, delete-first. */
        wmt_claim(&c, "model-a");
        strcpy(c.request_id, "rollout-model-a-7");
        c.mode = WM_UPSERT_DELETE_FIRST;
        c.phase = WM_PHASE_CLAIMED;
        c.expected_metadata_generation = 1;
        SEED("claim-new", SEL_LINEAGE_CLAIM, wm_encode_lineage_claim, &c);
        c.phase = WM_PHASE_COMMITTED;
        c.committed_watermark = 2;
        SEED("claim-committed", SEL_LINEAGE_CLAIM, wm_encode_lineage_claim, &c);
    }

    /* -- the weight_metadata section --------------------------------------- */
    {
        wm_section_image img = wmt_table_image(&t);
        SEED("section-table", SEL_SECTION, wm_encode_section, &img);
        /* The table after the migration ended and the lease was released. */
        t.rev[0].metadata_generation = 2;
        t.rev[0].residency = WM_RES_MIXED;
        t.rev[0].observed_hot_ratio = 0.5;
        t.rev[0].operation_id = 0;
        t.ops[1].state = WM_OPS_SUCCEEDED;
        t.ops[1].error[0] = '\0';
        t.rev[1].lease_count = 0;
        img.n_leases = 0;
        img.n_lineages = 0;
        SEED("section-settled", SEL_SECTION, wm_encode_section, &img);
        /* No section in the snapshot: an empty buffer is an empty table. */
        uint8_t sel = SEL_SECTION;
        n += fuzz_seed(dir, "section-empty", &sel, 1) < 0 ? 0 : 1;
    }

    wmt_table_clear(&t);
    return n;
}
