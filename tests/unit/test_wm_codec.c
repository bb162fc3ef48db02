/* test_wm_codec.c -- the weight records on disk (OpLog types 8-12 and the
 * weight_metadata section).
 *
 * Round trips of every record and of a whole table; then what a damaged log
 * or snapshot may hold: truncations, unknown enums, a missing identity, bad
 * UTF-8 and NULs in identity bytes, non-canonical keys, wrong digest lengths,
 * records that break an invariant, tables whose records disagree, and random
 * bytes -- all refused with SMP_EPROTO, none crashing, nothing leaked. The
 * encoder refuses to write what the decoder would refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weight_records.pb-c.h"
#include "wm_codec.h"
#include "wm_test_table.h"

/* ------------------------------------------------------------------------ */
/* Fixture: a small consistent table                                         */
/* ------------------------------------------------------------------------ */

typedef wmt_table fixture; /* wm_test_table.h */

static int setup(void **state)
{
    fixture *f = malloc(sizeof(*f));
    if (f == NULL) return -1;
    wmt_table_build(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    wmt_table_clear(f);
    free(f);
    return 0;
}

static int affinity_equal(const wm_affinity *a, const wm_affinity *b)
{
    if (a->n_units != b->n_units) return 0;
    for (size_t i = 0; i < a->n_units; i++) {
        if (a->units[i].logical_bytes != b->units[i].logical_bytes ||
            a->units[i].n_members != b->units[i].n_members)
            return 0;
        for (size_t j = 0; j < a->units[i].n_members; j++)
            if (strcmp(a->units[i].members[j], b->units[i].members[j]) != 0) return 0;
    }
    return 1;
}

/* Field-wise equality (struct padding is not part of a record). */
static void assert_revision_equal(const wm_revision *a, const wm_revision *b)
{
    assert_int_equal(wm_identity_cmp(&a->id, &b->id), 0);
    assert_int_equal(a->policy.preferred, b->policy.preferred);
    assert_true(a->policy.mixed_hot_ratio == b->policy.mixed_hot_ratio);
    assert_int_equal(a->policy.mode, b->policy.mode);
    assert_int_equal(a->availability, b->availability);
    assert_int_equal(a->residency, b->residency);
    assert_true(a->observed_hot_ratio == b->observed_hot_ratio);
    assert_int_equal(a->metadata_generation, b->metadata_generation);
    assert_int_equal(a->operation_id, b->operation_id);
    assert_string_equal(a->group_key, b->group_key);
    assert_string_equal(a->manifest_key, b->manifest_key);
    assert_memory_equal(a->manifest_sha256, b->manifest_sha256, WM_SHA256_LEN);
    assert_int_equal(a->payload_count, b->payload_count);
    assert_int_equal(a->logical_bytes, b->logical_bytes);
    assert_memory_equal(a->payload_keys_sha256, b->payload_keys_sha256, WM_SHA256_LEN);
    assert_int_equal(a->affinity_count, b->affinity_count);
    assert_memory_equal(a->affinity_sha256, b->affinity_sha256, WM_SHA256_LEN);
    assert_int_equal(a->created_ms, b->created_ms);
    assert_int_equal(a->updated_ms, b->updated_ms);
    assert_int_equal(a->last_access_ms, b->last_access_ms);
    assert_int_equal(a->lease_count, b->lease_count);
    assert_int_equal(a->degraded_from, b->degraded_from);
    assert_true(a->degraded_from_hot_ratio == b->degraded_from_hot_ratio);
}

static void assert_operation_equal(const wm_operation *a, const wm_operation *b)
{
    assert_int_equal(a->id, b->id);
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(wm_identity_cmp(&a->id_of, &b->id_of), 0);
    assert_int_equal(a->target, b->target);
    assert_true(a->target_hot_ratio == b->target_hot_ratio);
    assert_int_equal(a->members_done, b->members_done);
    assert_int_equal(a->members_total, b->members_total);
    assert_int_equal(a->bytes_done, b->bytes_done);
    assert_int_equal(a->bytes_total, b->bytes_total);
    assert_string_equal(a->cursor, b->cursor);
    assert_int_equal(a->state, b->state);
    assert_string_equal(a->error, b->error);
    assert_int_equal(a->attempts, b->attempts);
    assert_int_equal(a->created_ms, b->created_ms);
    assert_int_equal(a->updated_ms, b->updated_ms);
}

static void assert_lease_equal(const wm_lease *a, const wm_lease *b)
{
    assert_int_equal(a->id, b->id);
    assert_int_equal(wm_identity_cmp(&a->id_of, &b->id_of), 0);
    assert_int_equal(a->metadata_generation, b->metadata_generation);
    assert_int_equal(a->granted_ms, b->granted_ms);
    assert_int_equal(a->expiry_ms, b->expiry_ms);
}

static void assert_claim_equal(const wm_lineage_claim *a, const wm_lineage_claim *b)
{
    assert_string_equal(a->request_id, b->request_id);
    assert_int_equal(wm_identity_cmp(&a->base, &b->base), 0);
    assert_int_equal(wm_identity_cmp(&a->target, &b->target), 0);
    assert_int_equal(a->mode, b->mode);
    assert_int_equal(a->phase, b->phase);
    assert_int_equal(a->expected_metadata_generation, b->expected_metadata_generation);
    assert_int_equal(a->committed_watermark, b->committed_watermark);
    assert_string_equal(a->error, b->error);
    assert_int_equal(a->created_ms, b->created_ms);
    assert_int_equal(a->updated_ms, b->updated_ms);
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                               */
/* ------------------------------------------------------------------------ */

static void test_metadata_upsert_round_trip(void **state)
{
    fixture *f = *state;
    wm_metadata_upsert in, out;
    uint8_t *buf = NULL;
    size_t len = 0;
    char msg[256] = "";
    memset(&in, 0, sizeof(in));
    in.revision = f->rev[0];
    in.operations = f->ops;
    in.n_operations = 2;
    in.has_affinity = 1;
    in.affinity = f->aff[0];
    assert_int_equal(wm_encode_metadata_upsert(&in, &buf, &len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_decode_metadata_upsert(buf, len, &out, msg, sizeof(msg)), WM_OK);
    assert_revision_equal(&out.revision, &in.revision);
    assert_int_equal(out.n_operations, 2);
    assert_operation_equal(&out.operations[0], &f->ops[0]);
    assert_operation_equal(&out.operations[1], &f->ops[1]);
    assert_true(out.has_affinity);
    assert_true(affinity_equal(&out.affinity, &f->aff[0]));
    wm_metadata_upsert_clear(&out);
    free(buf);

    /* Without operations or summary (a later policy update). */
    wm_revision r = f->rev[1];
    r.metadata_generation = 9;
    r.policy.mode = WM_MODE_PINNED;
    memset(&in, 0, sizeof(in));
    in.revision = r;
    assert_int_equal(wm_encode_metadata_upsert(&in, &buf, &len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_decode_metadata_upsert(buf, len, &out, msg, sizeof(msg)), WM_OK);
    assert_revision_equal(&out.revision, &r);
    assert_false(out.has_affinity);
    assert_int_equal(out.n_operations, 0);
    wm_metadata_upsert_clear(&out);
    free(buf);

    /* The IMPORTING record, and a tombstone. */
    memset(&in, 0, sizeof(in));
    in.revision = f->rev[2];
    assert_int_equal(wm_encode_metadata_upsert(&in, &buf, &len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_decode_metadata_upsert(buf, len, &out, msg, sizeof(msg)), WM_OK);
    assert_revision_equal(&out.revision, &f->rev[2]);
    wm_metadata_upsert_clear(&out);
    free(buf);
    r = f->rev[0];
    r.availability = WM_AVAIL_DELETED;
    r.residency = WM_RES_ABSENT;
    r.observed_hot_ratio = 0;
    r.operation_id = 0;
    in.revision = r;
    assert_int_equal(wm_encode_metadata_upsert(&in, &buf, &len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_decode_metadata_upsert(buf, len, &out, msg, sizeof(msg)), WM_OK);
    assert_int_equal(out.revision.availability, WM_AVAIL_DELETED);
    wm_metadata_upsert_clear(&out);
    free(buf);
}

static void test_small_records_round_trip(void **state)
{
    fixture *f = *state;
    uint8_t *buf = NULL;
    size_t len = 0;
    char msg[256] = "";

    uint64_t ids[] = {1, 2};
    wm_metadata_delete d = {f->rev[2].id, 4, WM_DEL_IMPORT_ABORTED, ids, 2, NULL}, dout;
    assert_int_equal(wm_encode_metadata_delete(&d, &buf, &len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_decode_metadata_delete(buf, len, &dout, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_identity_cmp(&dout.id, &d.id), 0);
    assert_int_equal(dout.metadata_generation, 4);
    assert_int_equal(dout.reason, WM_DEL_IMPORT_ABORTED);
    assert_int_equal(dout.n_operation_ids, 2);
    assert_int_equal(dout.operation_ids[1], 2);
    wm_metadata_delete_clear(&dout);
    free(buf);

    wm_lease lout;
    assert_int_equal(wm_encode_lease_upsert(&f->lease, &buf, &len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_decode_lease_upsert(buf, len, &lout, wmt_ids_next(), msg, sizeof(msg)), WM_OK);
    assert_lease_equal(&lout, &f->lease);
    free(buf);

    wm_lease_delete ld = {7, f->rev[1].id, WM_LEASE_EXPIRED}, ldout;
    assert_int_equal(wm_encode_lease_delete(&ld, &buf, &len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_decode_lease_delete(buf, len, &ldout, wmt_ids_next(), msg, sizeof(msg)), WM_OK);
    assert_int_equal(ldout.lease_id, 7);
    assert_int_equal(ldout.reason, WM_LEASE_EXPIRED);
    assert_int_equal(wm_identity_cmp(&ldout.id_of, &ld.id_of), 0);
    free(buf);

    wm_lineage_claim cout;
    assert_int_equal(wm_encode_lineage_claim(&f->lin.claim, &buf, &len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_decode_lineage_claim(buf, len, &cout, wmt_ids_next(), msg, sizeof(msg)), WM_OK);
    assert_claim_equal(&cout, &f->lin.claim);
    free(buf);
}

static void test_section_round_trip(void **state)
{
    fixture *f = *state;
    wm_section_image in = wmt_table_image(f), out;
    uint8_t *buf = NULL;
    size_t len = 0;
    char msg[256] = "";
    assert_int_equal(wm_encode_section(&in, &buf, &len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_decode_section(buf, len, &out, msg, sizeof(msg)), WM_OK);
    assert_int_equal(out.n_revisions, 3);
    for (int i = 0; i < 3; i++) {
        assert_revision_equal(&out.revisions[i], &f->rev[i]);
        assert_true(affinity_equal(&out.affinities[i], &f->aff[i]));
    }
    assert_int_equal(out.n_operations, 2);
    assert_operation_equal(&out.operations[0], &f->ops[0]);
    assert_operation_equal(&out.operations[1], &f->ops[1]);
    assert_int_equal(out.n_leases, 1);
    assert_lease_equal(&out.leases[0], &f->lease);
    assert_int_equal(out.n_lineages, 1);
    assert_int_equal(wm_lineage_cmp(&out.lineages[0].lineage, &f->lin.lineage), 0);
    assert_int_equal(out.lineages[0].committed_watermark, 4);
    assert_true(out.lineages[0].has_claim);
    assert_claim_equal(&out.lineages[0].claim, &f->lin.claim);
    assert_int_equal(out.next_operation_id, 3);
    assert_int_equal(out.next_lease_id, 8);
    wm_section_image_clear(&out);
    free(buf);
}

static void test_empty_section(void **state)
{
    (void)state;
    wm_section_image out, empty;
    uint8_t *buf = NULL;
    size_t len = 99;
    /* No section in the snapshot: an empty table. */
    assert_int_equal(wm_decode_section(NULL, 0, &out, NULL, 0), WM_OK);
    assert_int_equal(out.n_revisions, 0);
    assert_int_equal(out.next_operation_id, 1);
    wm_section_image_clear(&out);
    memset(&empty, 0, sizeof(empty));
    empty.next_operation_id = 1;
    empty.next_lease_id = 1;
    assert_int_equal(wm_encode_section(&empty, &buf, &len, NULL, 0), WM_OK);
    assert_true(len > 0);
    assert_int_equal(wm_decode_section(buf, len, &out, NULL, 0), WM_OK);
    assert_int_equal(out.n_revisions + out.n_operations + out.n_leases + out.n_lineages, 0);
    wm_section_image_clear(&out);
    free(buf);
}

/* ------------------------------------------------------------------------ */
/* Malformed payloads                                                        */
/* ------------------------------------------------------------------------ */

/* Encode rev as a bare upsert (no operations, no summary). */
static void upsert_bytes(const wm_revision *rev, uint8_t **buf, size_t *len)
{
    wm_metadata_upsert in;
    memset(&in, 0, sizeof(in));
    in.revision = *rev;
    assert_int_equal(wm_encode_metadata_upsert(&in, buf, len, NULL, 0), WM_OK);
}

/* Unpack an upsert, let `edit` damage it, pack it again, and expect the
 * decoder to refuse it with a message mentioning `needle`. */
static void expect_refused_after(const uint8_t *buf, size_t len,
                                 void (*edit)(Wmrec__MetadataUpsert *), const char *needle)
{
    Wmrec__MetadataUpsert *m = wmrec__metadata_upsert__unpack(NULL, len, buf);
    assert_non_null(m);
    edit(m);
    size_t n = wmrec__metadata_upsert__get_packed_size(m);
    uint8_t *bad = malloc(n + 1);
    wmrec__metadata_upsert__pack(m, bad);
    wmrec__metadata_upsert__free_unpacked(m, NULL);
    wm_metadata_upsert out;
    char msg[256] = "";
    int rc = wm_decode_metadata_upsert(bad, n, &out, msg, sizeof(msg));
    free(bad);
    if (rc != SMP_EPROTO) fail_msg("damage \"%s\" decoded with %d", needle, rc);
    if (strstr(msg, needle) == NULL) fail_msg("message \"%s\" lacks \"%s\"", msg, needle);
}

static void edit_bad_availability(Wmrec__MetadataUpsert *m) { m->revision->availability = 9; }
static void edit_huge_enum(Wmrec__MetadataUpsert *m) { m->revision->residency = 0xFFFFFFFFu; }
static void edit_bad_mode(Wmrec__MetadataUpsert *m) { m->revision->policy->migration_mode = 0; }
static void edit_no_identity(Wmrec__MetadataUpsert *m)
{
    wmrec__identity__free_unpacked(m->revision->identity, NULL);
    m->revision->identity = NULL;
}
static void edit_no_policy(Wmrec__MetadataUpsert *m)
{
    wmrec__policy__free_unpacked(m->revision->policy, NULL);
    m->revision->policy = NULL;
}
static uint8_t bad_utf8[] = {'m', 0xFF, 'x'};
static void edit_bad_utf8(Wmrec__MetadataUpsert *m)
{
    m->revision->identity->resource_id.data = bad_utf8;
    m->revision->identity->resource_id.len = 3;
}
static uint8_t with_nul[] = {'m', 0, 'x'};
static void edit_nul(Wmrec__MetadataUpsert *m)
{
    m->revision->identity->tenant_id.data = with_nul;
    m->revision->identity->tenant_id.len = 3;
}
static void edit_empty_component(Wmrec__MetadataUpsert *m)
{
    m->revision->identity->namespace_.len = 0;
}
static void edit_group_key(Wmrec__MetadataUpsert *m)
{
    char *k = m->revision->group_key; /* generation 1 -> 9 */
    k[strlen(k) - 1] = '9';
}
static void edit_digest_len(Wmrec__MetadataUpsert *m) { m->revision->manifest_sha256.len = 31; }
static void edit_ready_unknown(Wmrec__MetadataUpsert *m) { m->revision->residency = 0; }
static void edit_generation(Wmrec__MetadataUpsert *m) { m->revision->metadata_generation = 0; }
static void edit_degraded_from_enum(Wmrec__MetadataUpsert *m) { m->revision->degraded_from = 7; }
static void edit_ready_degraded_from(Wmrec__MetadataUpsert *m)
{
    m->revision->degraded_from = WM_RES_HOT;
    m->revision->degraded_from_hot_ratio = 1.0;
}

static void test_upsert_refuses_damaged_fields(void **state)
{
    fixture *f = *state;
    uint8_t *buf = NULL;
    size_t len = 0;
    upsert_bytes(&f->rev[0], &buf, &len);
    expect_refused_after(buf, len, edit_bad_availability, "availability 9");
    expect_refused_after(buf, len, edit_huge_enum, "residency 4294967295");
    expect_refused_after(buf, len, edit_bad_mode, "migration mode 0");
    expect_refused_after(buf, len, edit_no_identity, "identity is missing");
    expect_refused_after(buf, len, edit_no_policy, "policy is missing");
    expect_refused_after(buf, len, edit_group_key, "group key");
    expect_refused_after(buf, len, edit_digest_len, "31 bytes");
    expect_refused_after(buf, len, edit_ready_unknown, "READY cannot have residency UNKNOWN");
    expect_refused_after(buf, len, edit_generation, "metadata_generation");
    expect_refused_after(buf, len, edit_degraded_from_enum, "residency before the loss 7 is unknown");
    expect_refused_after(buf, len, edit_ready_degraded_from,
                         "READY revision records a residency before a loss (HOT");
    free(buf);
}

/* Identity byte damage: build the message by hand so no static memory is
 * ever handed to protobuf-c's free. */
static void expect_identity_refused(fixture *f, void (*edit)(Wmrec__MetadataUpsert *),
                                    const char *needle)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    upsert_bytes(&f->rev[0], &buf, &len);
    Wmrec__MetadataUpsert *m = wmrec__metadata_upsert__unpack(NULL, len, buf);
    assert_non_null(m);
    Wmrec__Identity *id = m->revision->identity;
    ProtobufCBinaryData t = id->tenant_id, n = id->namespace_, r = id->resource_id;
    edit(m);
    size_t plen = wmrec__metadata_upsert__get_packed_size(m);
    uint8_t *bad = malloc(plen + 1);
    wmrec__metadata_upsert__pack(m, bad);
    id->tenant_id = t;
    id->namespace_ = n;
    id->resource_id = r;
    wmrec__metadata_upsert__free_unpacked(m, NULL);
    wm_metadata_upsert out;
    char msg[256] = "";
    assert_int_equal(wm_decode_metadata_upsert(bad, plen, &out, msg, sizeof(msg)), SMP_EPROTO);
    if (strstr(msg, needle) == NULL) fail_msg("message \"%s\" lacks \"%s\"", msg, needle);
    free(bad);
    free(buf);
}

static void test_upsert_refuses_bad_identity_bytes(void **state)
{
    fixture *f = *state;
    expect_identity_refused(f, edit_bad_utf8, "resource_id is not 1..256 bytes of UTF-8");
    expect_identity_refused(f, edit_nul, "tenant_id is not 1..256 bytes of UTF-8 without NUL");
    expect_identity_refused(f, edit_empty_component, "namespace is missing");
}

static void test_truncated_records_never_decode_wrongly(void **state)
{
    fixture *f = *state;
    wm_metadata_upsert in, out;
    uint8_t *buf = NULL;
    size_t len = 0;
    memset(&in, 0, sizeof(in));
    in.revision = f->rev[0];
    in.operations = f->ops;
    in.n_operations = 2;
    in.has_affinity = 1;
    in.affinity = f->aff[0];
    assert_int_equal(wm_encode_metadata_upsert(&in, &buf, &len, NULL, 0), WM_OK);
    /* Cutting inside the first field (the revision) always fails; every other
     * cut either fails or yields a record that passed every check. */
    size_t refused = 0;
    for (size_t cut = 0; cut < len; cut++) {
        int rc = wm_decode_metadata_upsert(buf, cut, &out, NULL, 0);
        if (rc == WM_OK) {
            assert_int_equal(wm_metadata_check(&out.revision, NULL, 0), WM_OK);
            wm_metadata_upsert_clear(&out);
        } else {
            assert_int_equal(rc, SMP_EPROTO);
            refused++;
        }
    }
    assert_true(refused > len / 2);
    assert_int_equal(wm_decode_metadata_upsert(buf, len - 1, &out, NULL, 0), SMP_EPROTO);
    free(buf);

    wm_section_image img = wmt_table_image(f), sout;
    assert_int_equal(wm_encode_section(&img, &buf, &len, NULL, 0), WM_OK);
    for (size_t cut = 1; cut < len; cut++) {
        int rc = wm_decode_section(buf, cut, &sout, NULL, 0);
        if (rc == WM_OK) wm_section_image_clear(&sout);
        else assert_int_equal(rc, SMP_EPROTO);
    }
    assert_int_equal(wm_decode_section(buf, len - 1, &sout, NULL, 0), SMP_EPROTO);
    free(buf);

    assert_int_equal(wm_encode_lineage_claim(&f->lin.claim, &buf, &len, NULL, 0), WM_OK);
    wm_lineage_claim c;
    for (size_t cut = 0; cut < len; cut++) {
        int rc = wm_decode_lineage_claim(buf, cut, &c, wmt_ids_next(), NULL, 0);
        if (rc != WM_OK) assert_int_equal(rc, SMP_EPROTO);
    }
    free(buf);
}

static void test_claim_and_lease_refuse_bad_enums(void **state)
{
    fixture *f = *state;
    uint8_t *buf = NULL;
    size_t len = 0;
    char msg[256];
    assert_int_equal(wm_encode_lineage_claim(&f->lin.claim, &buf, &len, NULL, 0), WM_OK);
    Wmrec__LineageClaim *m = wmrec__lineage_claim__unpack(NULL, len, buf);
    assert_non_null(m);
    m->phase = 77;
    uint8_t bad[4096];
    size_t n = wmrec__lineage_claim__pack(m, bad);
    wm_lineage_claim c;
    assert_int_equal(wm_decode_lineage_claim(bad, n, &c, wmt_ids_next(), msg, sizeof(msg)), SMP_EPROTO);
    assert_non_null(strstr(msg, "phase 77"));
    m->phase = WM_PHASE_CLAIMED;
    m->mode = 0;
    n = wmrec__lineage_claim__pack(m, bad);
    assert_int_equal(wm_decode_lineage_claim(bad, n, &c, wmt_ids_next(), msg, sizeof(msg)), SMP_EPROTO);
    m->mode = WM_UPSERT_PUT_FIRST;
    wmrec__identity__free_unpacked(m->target_identity, NULL);
    m->target_identity = NULL;
    n = wmrec__lineage_claim__pack(m, bad);
    assert_int_equal(wm_decode_lineage_claim(bad, n, &c, wmt_ids_next(), msg, sizeof(msg)), SMP_EPROTO);
    assert_non_null(strstr(msg, "claim target: identity is missing"));
    wmrec__lineage_claim__free_unpacked(m, NULL);
    free(buf);

    wm_lease_delete ld = {7, f->rev[1].id, WM_LEASE_RELEASED}, ldout;
    assert_int_equal(wm_encode_lease_delete(&ld, &buf, &len, NULL, 0), WM_OK);
    Wmrec__LeaseDelete *lm = wmrec__lease_delete__unpack(NULL, len, buf);
    lm->reason = 4;
    n = wmrec__lease_delete__pack(lm, bad);
    assert_int_equal(wm_decode_lease_delete(bad, n, &ldout, wmt_ids_next(), msg, sizeof(msg)), SMP_EPROTO);
    wmrec__lease_delete__free_unpacked(lm, NULL);
    free(buf);

    Wmrec__MetadataDelete dm = WMREC__METADATA_DELETE__INIT;
    dm.metadata_generation = 1;
    dm.reason = WM_DEL_TOMBSTONE_EXPIRED;
    n = wmrec__metadata_delete__pack(&dm, bad); /* no identity */
    wm_metadata_delete dout;
    assert_int_equal(wm_decode_metadata_delete(bad, n, &dout, msg, sizeof(msg)), SMP_EPROTO);
    assert_non_null(strstr(msg, "identity is missing"));
}

static void test_operation_refused_in_upsert(void **state)
{
    fixture *f = *state;
    wm_metadata_upsert in, out;
    uint8_t *buf = NULL;
    size_t len = 0;
    char msg[256];
    memset(&in, 0, sizeof(in));
    in.revision = f->rev[0];
    in.operations = f->ops;
    in.n_operations = 2;
    assert_int_equal(wm_encode_metadata_upsert(&in, &buf, &len, NULL, 0), WM_OK);
    Wmrec__MetadataUpsert *m = wmrec__metadata_upsert__unpack(NULL, len, buf);
    uint8_t bad[8192];
    m->operations[1]->kind = 12;
    size_t n = wmrec__metadata_upsert__pack(m, bad);
    assert_int_equal(wm_decode_metadata_upsert(bad, n, &out, msg, sizeof(msg)), SMP_EPROTO);
    assert_non_null(strstr(msg, "kind 12"));
    m->operations[1]->kind = WM_OPK_MIGRATING;
    m->operations[1]->state = WM_OPS_FAILED; /* the active op is not RUNNING */
    n = wmrec__metadata_upsert__pack(m, bad);
    assert_int_equal(wm_decode_metadata_upsert(bad, n, &out, msg, sizeof(msg)), SMP_EPROTO);
    assert_non_null(strstr(msg, "RUNNING"));
    m->operations[1]->state = WM_OPS_RUNNING;
    m->operations[0]->id = 2; /* the same op twice */
    n = wmrec__metadata_upsert__pack(m, bad);
    assert_int_equal(wm_decode_metadata_upsert(bad, n, &out, msg, sizeof(msg)), SMP_EPROTO);
    wmrec__metadata_upsert__free_unpacked(m, NULL);
    free(buf);

    /* The encoder refuses the same mistakes before anything is written. */
    wm_operation ops[2] = {f->ops[0], f->ops[1]};
    ops[1].state = WM_OPS_FAILED;
    in.operations = ops;
    buf = NULL;
    assert_int_equal(wm_encode_metadata_upsert(&in, &buf, &len, msg, sizeof(msg)),
                     WM_EINVALID_ARGUMENT);
    assert_null(buf);
    in.operations = f->ops;
    in.revision.residency = WM_RES_UNKNOWN;
    in.revision.observed_hot_ratio = 0;
    assert_int_equal(wm_encode_metadata_upsert(&in, &buf, &len, msg, sizeof(msg)),
                     WM_EINVALID_ARGUMENT);
    /* A summary that does not match the revision. */
    in.revision = f->rev[0];
    in.n_operations = 0;
    in.has_affinity = 1;
    in.affinity = f->aff[1];
    assert_int_equal(wm_encode_metadata_upsert(&in, &buf, &len, msg, sizeof(msg)),
                     WM_EINVALID_ARGUMENT);
    /* A summary for an unsealed import. */
    in.revision = f->rev[2];
    in.affinity = f->aff[0];
    assert_int_equal(wm_encode_metadata_upsert(&in, &buf, &len, msg, sizeof(msg)),
                     WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "sealed"));
}

/* Encode a table after `edit` has broken it without the encoder's check:
 * build the message from a valid table, then swap the bad record in. */
static void expect_section_refused(fixture *f, void (*edit)(wm_section_image *, fixture *),
                                   const char *needle)
{
    wm_section_image img = wmt_table_image(f), out;
    char msg[256] = "";
    fixture saved = *f;
    edit(&img, f);
    /* wm_section_check is what both the encoder and the decoder run. */
    int rc = wm_section_check(&img, msg, sizeof(msg));
    if (rc != WM_EINVALID_ARGUMENT) fail_msg("damage \"%s\" passed the table check", needle);
    if (strstr(msg, needle) == NULL) fail_msg("message \"%s\" lacks \"%s\"", msg, needle);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(wm_encode_section(&img, &buf, &len, NULL, 0), WM_EINVALID_ARGUMENT);
    assert_null(buf);
    (void)out;
    *f = saved;
}

static void break_duplicate_revision(wm_section_image *img, fixture *f)
{
    (void)img;
    f->rev[2] = f->rev[1];
    f->aff[2] = f->aff[1]; /* shared only until the fixture is restored */
}
static void break_lease_count(wm_section_image *img, fixture *f)
{
    (void)img;
    f->rev[1].lease_count = 2;
}
static void break_lease_on_importing(wm_section_image *img, fixture *f)
{
    (void)img;
    f->lease.id_of = f->rev[2].id;
}
static void break_missing_active_op(wm_section_image *img, fixture *f)
{
    (void)f;
    img->n_operations = 1;
}
static void break_orphan_running_op(wm_section_image *img, fixture *f)
{
    (void)img;
    f->rev[0].operation_id = 0;
}
static void break_next_ids(wm_section_image *img, fixture *f)
{
    (void)f;
    img->next_operation_id = 2;
}
static void break_next_lease(wm_section_image *img, fixture *f)
{
    (void)f;
    img->next_lease_id = 7;
}
static void break_missing_summary(wm_section_image *img, fixture *f)
{
    (void)f;
    img->affinities = NULL;
}
static void break_claim_watermark(wm_section_image *img, fixture *f)
{
    (void)img;
    f->lin.committed_watermark = 3;
}
static void break_claim_lineage(wm_section_image *img, fixture *f)
{
    (void)img;
    strcpy(f->lin.lineage.resource_id, "model-a");
}

static void test_section_refuses_inconsistent_tables(void **state)
{
    fixture *f = *state;
    expect_section_refused(f, break_duplicate_revision, "two records of revision");
    expect_section_refused(f, break_lease_count, "counts 2 leases, the table holds 1");
    expect_section_refused(f, break_lease_on_importing, "not READY or DEGRADED");
    expect_section_refused(f, break_missing_active_op, "names operation 2, which has no record");
    expect_section_refused(f, break_orphan_running_op, "RUNNING but not the revision's active one");
    expect_section_refused(f, break_next_ids, "next operation id 2");
    expect_section_refused(f, break_next_lease, "next lease id 7");
    expect_section_refused(f, break_missing_summary, "without an affinity summary");
    expect_section_refused(f, break_claim_watermark, "watermark");
    expect_section_refused(f, break_claim_lineage, "lineage");
}

static void test_section_refuses_bad_format_and_entries(void **state)
{
    fixture *f = *state;
    wm_section_image img = wmt_table_image(f), out;
    uint8_t *buf = NULL;
    size_t len = 0;
    char msg[256];
    assert_int_equal(wm_encode_section(&img, &buf, &len, NULL, 0), WM_OK);
    Wmrec__WeightMetadataSection *m = wmrec__weight_metadata_section__unpack(NULL, len, buf);
    assert_non_null(m);
    uint8_t *bad = malloc(len + 64);
    m->format = 2;
    size_t n = wmrec__weight_metadata_section__pack(m, bad);
    assert_int_equal(wm_decode_section(bad, n, &out, msg, sizeof(msg)), SMP_EPROTO);
    assert_non_null(strstr(msg, "format 2"));
    m->format = 1;
    m->leases[0]->expiry_ms = 1; /* expires before granted */
    n = wmrec__weight_metadata_section__pack(m, bad);
    assert_int_equal(wm_decode_section(bad, n, &out, msg, sizeof(msg)), SMP_EPROTO);
    m->leases[0]->expiry_ms = 35000;
    m->revisions[0]->affinity->units[0]->logical_bytes = 101;
    n = wmrec__weight_metadata_section__pack(m, bad);
    assert_int_equal(wm_decode_section(bad, n, &out, msg, sizeof(msg)), SMP_EPROTO);
    assert_non_null(strstr(msg, "bytes"));
    m->revisions[0]->affinity->units[0]->logical_bytes = 100;
    n = wmrec__weight_metadata_section__pack(m, bad);
    assert_int_equal(wm_decode_section(bad, n, &out, msg, sizeof(msg)), WM_OK);
    wm_section_image_clear(&out);
    free(bad);
    wmrec__weight_metadata_section__free_unpacked(m, NULL);
    free(buf);
}

static void test_random_bytes_never_crash(void **state)
{
    fixture *f = *state;
    uint8_t buf[512];
    unsigned seed = 12345;
    uint8_t *valid = NULL;
    size_t vlen = 0;
    wm_section_image img = wmt_table_image(f);
    assert_int_equal(wm_encode_section(&img, &valid, &vlen, NULL, 0), WM_OK);
    for (int round = 0; round < 3000; round++) {
        size_t len = (size_t)(rand_r(&seed) % sizeof(buf));
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rand_r(&seed);
        wm_metadata_upsert u;
        wm_metadata_delete d;
        wm_lease l;
        wm_lease_delete ld;
        wm_lineage_claim c;
        wm_section_image s;
        if (wm_decode_metadata_upsert(buf, len, &u, NULL, 0) == WM_OK) wm_metadata_upsert_clear(&u);
        if (wm_decode_metadata_delete(buf, len, &d, NULL, 0) == WM_OK) wm_metadata_delete_clear(&d);
        (void)wm_decode_lease_upsert(buf, len, &l, wmt_ids_next(), NULL, 0);
        (void)wm_decode_lease_delete(buf, len, &ld, wmt_ids_next(), NULL, 0);
        (void)wm_decode_lineage_claim(buf, len, &c, wmt_ids_next(), NULL, 0);
        if (wm_decode_section(buf, len, &s, NULL, 0) == WM_OK) wm_section_image_clear(&s);
        /* Flip a few bytes of a valid section too. */
        uint8_t *mut = malloc(vlen);
        memcpy(mut, valid, vlen);
        for (int k = 0; k < 3; k++) mut[rand_r(&seed) % vlen] ^= (uint8_t)(1u << (rand_r(&seed) % 8));
        if (wm_decode_section(mut, vlen, &s, NULL, 0) == WM_OK) wm_section_image_clear(&s);
        free(mut);
    }
    free(valid);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_metadata_upsert_round_trip),
        T(test_small_records_round_trip),
        T(test_section_round_trip),
        cmocka_unit_test(test_empty_section),
        T(test_upsert_refuses_damaged_fields),
        T(test_upsert_refuses_bad_identity_bytes),
        T(test_truncated_records_never_decode_wrongly),
        T(test_claim_and_lease_refuse_bad_enums),
        T(test_operation_refused_in_upsert),
        T(test_section_refuses_inconsistent_tables),
        T(test_section_refuses_bad_format_and_entries),
        T(test_random_bytes_never_crash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
