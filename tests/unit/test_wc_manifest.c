/* test_wc_manifest.c -- the manifest model: round trips through protobuf-c,
 * the group key, the digest, and one refusal per validation rule.
 *
 * Refusals are made on the wire: a valid StoredWeightManifest is built by hand
 * from stack messages (fixture below), one field is broken, it is packed, and
 * wc_manifest_decode must answer SMP_EPROTO with a message naming the tensor
 * or object. A bounded loop of random byte damage must never crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "manifest.pb-c.h"
#include "wc_manifest.h"
#include "wc_plan.h"

#define GROUP "weights/acme/llm/llama-7b/main/3"

/* ---- a valid manifest on the wire -----------------------------------------
 * tensors: a F32 [4,6] as two column halves, b BF16 [8] whole, c tied to b.
 * object 0 (112 bytes): a's halves at 0 and 48, b at 96. One unit {0}. */
typedef struct fx {
    StoredWeightManifest msg;
    ManifestIdentity id;
    ManifestTensor t[4];
    ManifestTensor *tp[4];
    uint64_t shape[4][WC_MAX_NDIM + 2];
    ManifestFragment f[6];
    ManifestFragment *fp[6];
    uint64_t off[6][WC_MAX_NDIM + 2];
    uint64_t lsh[6][WC_MAX_NDIM + 2];
    ManifestAliasGroup a[2];
    ManifestAliasGroup *ap[2];
    uint32_t ai[2][4];
    ManifestObject o[3];
    ManifestObject *op[3];
    char keys[3][96];
    ManifestAffinityUnit u[3];
    ManifestAffinityUnit *up[3];
    uint32_t ui[3][4];
} fx;

static void fx_tensor(fx *x, const char *name, const char *dtype, uint32_t item, size_t nd,
                      const uint64_t *shape)
{
    size_t i = x->msg.n_tensors++;
    manifest_tensor__init(&x->t[i]);
    x->t[i].name = (char *)name;
    x->t[i].dtype = (char *)dtype;
    x->t[i].item_size = item;
    x->t[i].n_shape = nd;
    memcpy(x->shape[i], shape, nd * sizeof *shape);
    x->t[i].shape = x->shape[i];
    x->tp[i] = &x->t[i];
}

static void fx_fragment(fx *x, uint32_t tensor, size_t nd, const uint64_t *off,
                        const uint64_t *shp, uint32_t object, uint64_t at, uint64_t bytes)
{
    size_t i = x->msg.n_fragments++;
    manifest_fragment__init(&x->f[i]);
    x->f[i].tensor_index = tensor;
    x->f[i].n_global_offset = nd;
    x->f[i].n_local_shape = nd;
    memcpy(x->off[i], off, nd * sizeof *off);
    memcpy(x->lsh[i], shp, nd * sizeof *shp);
    x->f[i].global_offset = x->off[i];
    x->f[i].local_shape = x->lsh[i];
    x->f[i].object_index = object;
    x->f[i].object_offset = at;
    x->f[i].bytes = bytes;
    x->fp[i] = &x->f[i];
}

static void fx_object(fx *x, const char *suffix, uint64_t bytes)
{
    size_t i = x->msg.n_objects++;
    manifest_object__init(&x->o[i]);
    snprintf(x->keys[i], sizeof x->keys[i], "%s/%s", GROUP, suffix);
    x->o[i].key = x->keys[i];
    x->o[i].bytes = bytes;
    x->op[i] = &x->o[i];
}

static void fx_unit(fx *x, uint32_t n, const uint32_t *objs, uint64_t bytes)
{
    size_t i = x->msg.n_affinity_units++;
    manifest_affinity_unit__init(&x->u[i]);
    memcpy(x->ui[i], objs, n * sizeof *objs);
    x->u[i].n_object_index = n;
    x->u[i].object_index = x->ui[i];
    x->u[i].logical_bytes = bytes;
    x->up[i] = &x->u[i];
}

static void fx_init(fx *x)
{
    memset(x, 0, sizeof *x);
    stored_weight_manifest__init(&x->msg);
    manifest_identity__init(&x->id);
    x->id.tenant_id = "acme";
    x->id.namespace_id = "llm";
    x->id.resource_id = "llama-7b";
    x->id.revision = "main";
    x->id.weight_generation = 3;
    x->msg.format_version = 1;
    x->msg.identity = &x->id;
    x->msg.group = GROUP;
    x->msg.tensors = x->tp;
    x->msg.fragments = x->fp;
    x->msg.alias_groups = x->ap;
    x->msg.objects = x->op;
    x->msg.affinity_units = x->up;

    const uint64_t sa[2] = {4, 6}, sb[1] = {8};
    fx_tensor(x, "a", "F32", 4, 2, sa);
    fx_tensor(x, "b", "BF16", 2, 1, sb);
    fx_tensor(x, "c", "BF16", 2, 1, sb);
    const uint64_t o0[2] = {0, 0}, o1[2] = {0, 3}, half[2] = {4, 3}, ob[1] = {0};
    fx_fragment(x, 0, 2, o0, half, 0, 0, 48);
    fx_fragment(x, 0, 2, o1, half, 0, 48, 48);
    fx_fragment(x, 1, 1, ob, sb, 0, 96, 16);
    manifest_alias_group__init(&x->a[0]);
    x->ai[0][0] = 1;
    x->ai[0][1] = 2;
    x->a[0].n_tensor_index = 2;
    x->a[0].tensor_index = x->ai[0];
    x->ap[0] = &x->a[0];
    x->msg.n_alias_groups = 1;
    fx_object(x, "payload/0", 112);
    const uint32_t u0[1] = {0};
    fx_unit(x, 1, u0, 112);
}

static uint8_t *fx_pack(const fx *x, size_t *len)
{
    *len = stored_weight_manifest__get_packed_size(&x->msg);
    uint8_t *buf = malloc(*len + 1);
    assert_non_null(buf);
    stored_weight_manifest__pack(&x->msg, buf);
    return buf;
}

/* Decode x; on success m holds the model. */
static int fx_decode(const fx *x, wc_manifest *m, char *err, size_t errlen)
{
    size_t len;
    uint8_t *buf = fx_pack(x, &len);
    int rc = wc_manifest_decode(buf, len, m, err, errlen);
    free(buf);
    return rc;
}

/* x must be refused with SMP_EPROTO and a message containing needle. */
static void expect_refused(const fx *x, const char *needle)
{
    wc_manifest m;
    char err[512] = "";
    int rc = fx_decode(x, &m, err, sizeof err);
    if (rc == SMP_OK) {
        wc_manifest_free(&m);
        fail_msg("accepted; expected a refusal mentioning '%s'", needle);
    }
    assert_int_equal(rc, SMP_EPROTO);
    if (strstr(err, needle) == NULL) fail_msg("message '%s' does not mention '%s'", err, needle);
}

/* ---- round trips ------------------------------------------------------------ */

static void test_round_trip_is_byte_exact(void **state)
{
    (void)state;
    fx x;
    fx_init(&x);
    wc_manifest m;
    char err[256] = "";
    size_t len;
    uint8_t *orig = fx_pack(&x, &len);
    assert_int_equal(wc_manifest_decode(orig, len, &m, err, sizeof err), SMP_OK);
    assert_string_equal(m.identity.tenant_id, "acme");
    assert_string_equal(m.identity.resource_id, "llama-7b");
    assert_int_equal(m.identity.generation, 3);
    assert_string_equal(m.group, GROUP);
    assert_int_equal(m.n_tensors, 3);
    assert_int_equal(m.tensors[0].dtype, WC_DTYPE_F32);
    assert_int_equal(m.tensors[0].bytes, 96);
    assert_int_equal(m.tensors[0].frag_count, 2);
    assert_int_equal(m.tensors[2].storage, 1);
    assert_int_equal(m.tensors[2].alias_group, 0);
    assert_int_equal(m.tensors[2].frag_count, 0);
    assert_int_equal(m.objects[0].unit, 0);
    assert_int_equal(wc_manifest_find_tensor(&m, "b"), 1);
    assert_int_equal(wc_manifest_find_tensor(&m, "zz"), WC_NONE);

    uint8_t *again;
    size_t len2;
    assert_int_equal(wc_manifest_encode(&m, &again, &len2), SMP_OK);
    assert_int_equal(len2, len);
    assert_memory_equal(again, orig, len);

    uint8_t d1[32], d2[32];
    wc_manifest_sha256(orig, len, d1);
    wc_manifest_sha256(again, len2, d2);
    assert_memory_equal(d1, d2, 32);
    free(again);
    free(orig);
    wc_manifest_free(&m);
    wc_manifest_free(&m);                /* a zeroed model frees as a no-op */
}


/* The integrity fields of an object (SHA-256 and per-chunk XXH3) survive a
 * round trip; a chunk count that does not fit the object, or a digest of
 * the wrong length, is refused. */
static void test_object_checks_round_trip_and_are_validated(void **state)
{
    (void)state;
    fx x;
    fx_init(&x);
    uint8_t sha[32];
    uint64_t sums[3] = {11, 22, 33};
    for (int i = 0; i < 32; i++) sha[i] = (uint8_t)i;
    size_t obytes = x.o[0].bytes;
    uint64_t chunk = obytes / 3 + 1; /* three chunks, the last one short */
    x.o[0].sha256.data = sha;
    x.o[0].sha256.len = 32;
    x.o[0].check_chunk_bytes = chunk;
    x.o[0].n_chunk_xxh3 = 3;
    x.o[0].chunk_xxh3 = sums;
    wc_manifest m;
    char err[256] = "";
    assert_int_equal(fx_decode(&x, &m, err, sizeof err), SMP_OK);
    assert_true(m.objects[0].has_sha256);
    assert_memory_equal(m.objects[0].sha256, sha, 32);
    assert_int_equal(m.objects[0].n_chunks, 3);
    assert_int_equal(m.objects[0].chunk_bytes, chunk);
    assert_true(m.objects[0].chunk_xxh3[2] == 33);
    assert_int_equal(m.n_objects, 1);
    uint8_t *enc;
    size_t len, len0;
    uint8_t *orig = fx_pack(&x, &len0);
    assert_int_equal(wc_manifest_encode(&m, &enc, &len), SMP_OK);
    assert_int_equal(len, len0);
    assert_memory_equal(enc, orig, len);
    free(enc);
    free(orig);
    wc_manifest_free(&m);

    x.o[0].n_chunk_xxh3 = 2;
    expect_refused(&x, "chunk checksums");
    x.o[0].n_chunk_xxh3 = 3;
    x.o[0].check_chunk_bytes = 0;
    expect_refused(&x, "chunk checksums");
    x.o[0].check_chunk_bytes = chunk;
    x.o[0].sha256.len = 31;
    expect_refused(&x, "sha256");
}

/* Built with the builder in any fragment order: finalize sorts canonically. */
static void test_builder_round_trip_and_canonical_order(void **state)
{
    (void)state;
    wc_identity id = {"t", "n", "r", "v", 9};
    wc_manifest m, d;
    char err[256] = "";
    uint32_t ti, ts, o;
    assert_int_equal(wc_manifest_init(&m, &id, err, sizeof err), SMP_OK);
    const uint64_t shape[3] = {2, 3, 4};
    assert_int_equal(wc_manifest_add_tensor(&m, "x", WC_DTYPE_F8_E5M2, 3, shape, &ti), SMP_OK);
    assert_int_equal(wc_manifest_add_tensor(&m, "s", WC_DTYPE_I64, 0, NULL, &ts), SMP_OK);
    assert_int_equal(wc_manifest_add_object(&m, "weights/t/n/r/v/9/payload/0", 32, &o), SMP_OK);
    const uint64_t o1[3] = {1, 0, 0}, o0[3] = {0, 0, 0}, s1[3] = {1, 3, 4};
    assert_int_equal(wc_manifest_add_fragment(&m, ti, o1, s1, o, 12, 12), SMP_OK);
    assert_int_equal(wc_manifest_add_fragment(&m, ts, NULL, NULL, o, 24, 8), SMP_OK);
    assert_int_equal(wc_manifest_add_fragment(&m, ti, o0, s1, o, 0, 12), SMP_OK);
    const uint32_t u[1] = {0};
    assert_int_equal(wc_manifest_add_unit(&m, u, 1, 32), SMP_OK);
    uint8_t *buf;
    size_t len;
    assert_int_equal(wc_manifest_encode(&m, &buf, &len), SMP_ESTATE);   /* not finalized */
    assert_int_equal(wc_manifest_finalize(&m, err, sizeof err), SMP_OK);
    assert_int_equal(m.fragments[0].offset[0], 0);                     /* sorted */
    assert_int_equal(m.fragments[1].offset[0], 1);
    assert_int_equal(m.fragments[2].tensor, ts);
    assert_int_equal(wc_manifest_encode(&m, &buf, &len), SMP_OK);
    assert_int_equal(wc_manifest_decode(buf, len, &d, err, sizeof err), SMP_OK);
    assert_int_equal(d.n_fragments, 3);
    assert_int_equal(d.tensors[1].ndim, 0);
    assert_int_equal(d.tensors[1].bytes, 8);
    free(buf);
    wc_manifest_free(&d);

    /* the builder's own refusal is SMP_EINVAL */
    const uint64_t big[3] = {2, 3, 5};
    assert_int_equal(wc_manifest_add_fragment(&m, ti, o0, big, o, 0, 30), SMP_OK);
    assert_int_equal(wc_manifest_finalize(&m, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "'x'"));
    assert_int_equal(wc_manifest_add_tensor(&m, "deep", WC_DTYPE_F32, WC_MAX_NDIM + 1, big, NULL),
                     SMP_EINVAL);
    assert_int_equal(wc_manifest_add_fragment(&m, 77, o0, big, o, 0, 30), SMP_EINVAL);
    wc_manifest_free(&m);
}

/* A model with tensor "w" (F32 [4]) and attachment `name` (dtype, [n]) in
 * one object; the attachment is added first when `first`. Finalized into
 * *m; returns wc_manifest_finalize's code with its message in err. */
static int build_with_attachment(wc_manifest *m, const char *name, wc_dtype dtype, uint64_t n,
                                 int first, char *err, size_t errlen)
{
    wc_identity id = {"t", "n", "r", "v", 1};
    uint32_t tw, ta, o;
    const uint64_t sw[1] = {4}, sa[1] = {n}, zero[1] = {0};
    uint64_t abytes = n * wc_dtype_size(dtype);
    assert_int_equal(wc_manifest_init(m, &id, err, errlen), SMP_OK);
    if (first) assert_int_equal(wc_manifest_add_tensor(m, name, dtype, 1, sa, &ta), SMP_OK);
    assert_int_equal(wc_manifest_add_tensor(m, "w", WC_DTYPE_F32, 1, sw, &tw), SMP_OK);
    if (!first) assert_int_equal(wc_manifest_add_tensor(m, name, dtype, 1, sa, &ta), SMP_OK);
    assert_int_equal(wc_manifest_set_attachment(m, ta), SMP_OK);
    assert_int_equal(wc_manifest_add_object(m, "weights/t/n/r/v/1/payload/0", 16 + abytes, &o),
                     SMP_OK);
    assert_int_equal(wc_manifest_add_fragment(m, tw, zero, sw, o, 0, 16), SMP_OK);
    if (abytes) assert_int_equal(wc_manifest_add_fragment(m, ta, zero, sa, o, 16, abytes), SMP_OK);
    const uint32_t u[1] = {0};
    assert_int_equal(wc_manifest_add_unit(m, u, 1, 16 + abytes), SMP_OK);
    return wc_manifest_finalize(m, err, errlen);
}

/* Attachments (files of a model directory) round trip as format 2, after
 * every tensor; a format-1 manifest may not carry one; each rule refused. */
static void test_attachments_round_trip_and_rules(void **state)
{
    (void)state;
    wc_manifest m, d;
    char err[256] = "";
    uint8_t *buf;
    size_t len;
    assert_int_equal(build_with_attachment(&m, "config.json", WC_DTYPE_U8, 10, 0, err, sizeof err),
                     SMP_OK);
    assert_int_equal(wc_manifest_n_plain(&m), 1);
    assert_int_equal(wc_manifest_encode(&m, &buf, &len), SMP_OK);
    StoredWeightManifest *msg = stored_weight_manifest__unpack(NULL, len, buf);
    assert_non_null(msg);
    assert_int_equal(msg->format_version, WC_MANIFEST_FORMAT_ATTACHMENTS);
    assert_true(msg->tensors[1]->attachment);
    assert_false(msg->tensors[0]->attachment);
    assert_int_equal(wc_manifest_decode(buf, len, &d, err, sizeof err), SMP_OK);
    assert_true(d.tensors[1].attachment);
    assert_int_equal(wc_manifest_n_plain(&d), 1);
    wc_manifest_free(&d);
    free(buf);
    msg->format_version = 1; /* an attachment in a format-1 manifest */
    len = stored_weight_manifest__get_packed_size(msg);
    buf = malloc(len);
    stored_weight_manifest__pack(msg, buf);
    assert_int_equal(wc_manifest_decode(buf, len, &d, err, sizeof err), SMP_EPROTO);
    assert_non_null(strstr(err, "attachment 'config.json' in a manifest of format_version 1"));
    free(buf);
    stored_weight_manifest__free_unpacked(msg, NULL);
    wc_manifest_free(&m);

    /* without attachments a manifest stays format 1, readable by older readers */
    fx x;
    fx_init(&x);
    assert_int_equal(fx_decode(&x, &m, err, sizeof err), SMP_OK);
    assert_int_equal(wc_manifest_n_plain(&m), m.n_tensors);
    assert_int_equal(wc_manifest_encode(&m, &buf, &len), SMP_OK);
    msg = stored_weight_manifest__unpack(NULL, len, buf);
    assert_int_equal(msg->format_version, 1);
    stored_weight_manifest__free_unpacked(msg, NULL);
    free(buf);
    wc_manifest_free(&m);

    /* the rules */
    assert_int_equal(build_with_attachment(&m, "config.json", WC_DTYPE_F32, 4, 0, err, sizeof err),
                     SMP_EINVAL);
    assert_non_null(strstr(err, "attachment 'config.json' is not U8"));
    wc_manifest_free(&m);
    assert_int_equal(build_with_attachment(&m, "config.json", WC_DTYPE_U8, 4, 1, err, sizeof err),
                     SMP_EINVAL);
    assert_non_null(strstr(err, "tensor 'w' comes after an attachment"));
    wc_manifest_free(&m);
    assert_int_equal(build_with_attachment(&m, "sub/config.json", WC_DTYPE_U8, 4, 0, err, sizeof err),
                     SMP_EINVAL);
    assert_non_null(strstr(err, "'sub/config.json' is not a file name"));
    wc_manifest_free(&m);
    assert_int_equal(build_with_attachment(&m, "..", WC_DTYPE_U8, 4, 0, err, sizeof err), SMP_EINVAL);
    wc_manifest_free(&m);
    assert_int_equal(build_with_attachment(&m, "huge.bin", WC_DTYPE_U8, WC_ATTACHMENT_MAX_BYTES + 1,
                                           0, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "attachment 'huge.bin': 67108865 bytes, over the 67108864 bytes"));
    wc_manifest_free(&m);
    assert_int_equal(build_with_attachment(&m, "empty.json", WC_DTYPE_U8, 0, 0, err, sizeof err),
                     SMP_OK); /* an empty file is an attachment with no fragment */
    wc_manifest_free(&m);
}

/* The source files' __metadata__ pairs: kept in key order through a round
 * trip, the format unchanged; each rule refused when added and on the wire. */
static void test_file_metadata_round_trips_and_is_validated(void **state)
{
    (void)state;
    fx x;
    wc_manifest m, d;
    char err[256] = "";
    uint8_t *buf;
    size_t len;
    fx_init(&x);
    assert_int_equal(fx_decode(&x, &m, err, sizeof err), SMP_OK);
    assert_int_equal(m.n_file_meta, 0);
    assert_int_equal(wc_manifest_add_file_meta(&m, "format", "pt", err, sizeof err), SMP_OK);
    assert_int_equal(wc_manifest_add_file_meta(&m, "author", "caf\xc3\xa9", err, sizeof err),
                     SMP_OK);
    assert_int_equal(wc_manifest_add_file_meta(&m, "empty", "", err, sizeof err), SMP_OK);
    assert_int_equal(wc_manifest_add_file_meta(&m, "format", "np", err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "'format' given twice"));
    assert_int_equal(wc_manifest_add_file_meta(&m, "", "x", err, sizeof err), SMP_EINVAL);
    assert_int_equal(wc_manifest_add_file_meta(&m, "bad", "\xc3(", err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "'bad': key or value is not valid UTF-8"));
    assert_int_equal(wc_manifest_add_file_meta(&m, "\xed\xa0\x80", "x", err, sizeof err),
                     SMP_EINVAL); /* a surrogate */
    assert_int_equal(m.n_file_meta, 3);
    assert_int_equal(wc_manifest_encode(&m, &buf, &len), SMP_OK);
    StoredWeightManifest *msg = stored_weight_manifest__unpack(NULL, len, buf);
    assert_non_null(msg);
    assert_int_equal(msg->format_version, 1);
    assert_int_equal(msg->n_file_metadata, 3);
    assert_string_equal(msg->file_metadata[0]->key, "author");
    assert_string_equal(msg->file_metadata[2]->key, "format");
    assert_int_equal(wc_manifest_decode(buf, len, &d, err, sizeof err), SMP_OK);
    assert_int_equal(d.n_file_meta, 3);
    assert_string_equal(d.file_meta[0].value, "caf\xc3\xa9");
    assert_string_equal(d.file_meta[1].key, "empty");
    assert_string_equal(d.file_meta[2].value, "pt");
    wc_manifest_free(&d);
    free(buf);

    /* on the wire: a repeated key, an empty key, bytes that are not UTF-8 */
    const char *bad[3][2] = {{"format", "np"}, {"", "x"}, {"k", "\xff"}};
    const char *why[3] = {"'format' given twice", "an empty key", "not valid UTF-8"};
    for (int i = 0; i < 3; i++) {
        char *key0 = msg->file_metadata[0]->key, *value0 = msg->file_metadata[0]->value;
        msg->file_metadata[0]->key = (char *)bad[i][0];
        msg->file_metadata[0]->value = (char *)bad[i][1];
        len = stored_weight_manifest__get_packed_size(msg);
        buf = malloc(len);
        stored_weight_manifest__pack(msg, buf);
        assert_int_equal(wc_manifest_decode(buf, len, &d, err, sizeof err), SMP_EPROTO);
        assert_non_null(strstr(err, why[i]));
        free(buf);
        msg->file_metadata[0]->key = key0;
        msg->file_metadata[0]->value = value0;
    }
    stored_weight_manifest__free_unpacked(msg, NULL);

    /* the bounds: pairs, then bytes */
    for (unsigned i = m.n_file_meta; i < WC_FILE_META_MAX_PAIRS; i++) {
        char k[32];
        snprintf(k, sizeof k, "k%05u", i);
        assert_int_equal(wc_manifest_add_file_meta(&m, k, "v", err, sizeof err), SMP_OK);
    }
    assert_int_equal(wc_manifest_add_file_meta(&m, "one-more", "v", err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "over the 1024 pairs"));
    wc_manifest_free(&m);
    fx_init(&x);
    assert_int_equal(fx_decode(&x, &m, err, sizeof err), SMP_OK);
    char *big = malloc(WC_FILE_META_MAX_BYTES);
    memset(big, 'a', WC_FILE_META_MAX_BYTES - 1);
    big[WC_FILE_META_MAX_BYTES - 1] = '\0';
    assert_int_equal(wc_manifest_add_file_meta(&m, "k", big, err, sizeof err), SMP_OK);
    assert_int_equal(wc_manifest_add_file_meta(&m, "k2", "", err, sizeof err), SMP_EINVAL);
    free(big);
    wc_manifest_free(&m);
}

static void test_group_key_percent_encodes_components(void **state)
{
    (void)state;
    wc_identity id = {"ten ant", "a/b", "r\xc3\xa4-1.0_x~", "rev%", 18446744073709551615ull};
    char *key;
    assert_int_equal(wc_group_key(&id, &key), SMP_OK);
    assert_string_equal(key, "weights/ten%20ant/a%2Fb/r%C3%A4-1.0_x~/rev%25/18446744073709551615");
    free(key);
    wc_identity empty = {"t", "", "r", "v", 1};
    assert_int_equal(wc_group_key(&empty, &key), SMP_EINVAL);
    wc_manifest m;
    assert_int_equal(wc_manifest_init(&m, &empty, NULL, 0), SMP_EINVAL);
}

static void test_sha256_is_the_standard_digest(void **state)
{
    (void)state;
    static const uint8_t want[32] = {
        0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae, 0x22, 0x23,
        0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
    uint8_t d[32];
    wc_manifest_sha256((const uint8_t *)"abc", 3, d);
    assert_memory_equal(d, want, 32);
}

/* ---- refusals, one per rule -------------------------------------------------- */

static void test_undecodable_bytes_and_versions_are_refused(void **state)
{
    (void)state;
    wc_manifest m;
    char err[256];
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(wc_manifest_decode(junk, sizeof junk, &m, err, sizeof err), SMP_EPROTO);
    assert_int_equal(wc_manifest_decode(NULL, 0, &m, err, sizeof err), SMP_EPROTO);
    fx x;
    fx_init(&x);
    x.msg.format_version = 3;
    expect_refused(&x, "format_version");
    fx_init(&x);
    x.msg.format_version = 0;
    expect_refused(&x, "format_version");
    fx_init(&x);
    x.msg.identity = NULL;
    expect_refused(&x, "identity");
    fx_init(&x);
    x.id.revision = "";
    expect_refused(&x, "identity");
    fx_init(&x);
    x.msg.group = "weights/acme/llm/llama-7b/main/4";
    expect_refused(&x, "group");
}

static void test_bad_tensors_are_refused(void **state)
{
    (void)state;
    fx x;
    fx_init(&x);
    x.t[1].dtype = "F12";
    expect_refused(&x, "'b'");
    fx_init(&x);
    x.t[1].item_size = 4;
    expect_refused(&x, "'b'");
    fx_init(&x);
    x.t[2].name = "b";
    expect_refused(&x, "'b' appears twice");
    fx_init(&x);
    x.t[2].name = "";
    expect_refused(&x, "empty name");
    fx_init(&x);
    x.t[0].n_shape = WC_MAX_NDIM + 1;
    expect_refused(&x, "'a'");
    fx_init(&x);                              /* size over 64 bits */
    x.shape[1][0] = 1ull << 63;               /* times 2 bytes */
    expect_refused(&x, "overflows");
}

static void test_bad_fragments_are_refused(void **state)
{
    (void)state;
    fx x;
    fx_init(&x);                              /* outside the global shape */
    x.off[1][1] = 4;
    expect_refused(&x, "'a'");
    fx_init(&x);
    x.off[1][1] = UINT64_MAX;                 /* overflowing offset */
    expect_refused(&x, "'a'");
    fx_init(&x);                              /* bytes != product(shape) * item */
    x.f[2].bytes = 15;
    expect_refused(&x, "'b'");
    fx_init(&x);                              /* outside its object */
    x.f[2].object_offset = 100;
    expect_refused(&x, "'b'");
    fx_init(&x);
    x.f[2].object_index = 5;
    expect_refused(&x, "'b'");
    fx_init(&x);
    x.f[2].tensor_index = 9;
    expect_refused(&x, "tensor index 9");
    fx_init(&x);                              /* offsets for the wrong rank */
    x.f[2].n_global_offset = 2;
    expect_refused(&x, "'b'");
    fx_init(&x);                              /* empty dimension */
    x.lsh[0][0] = 0;
    x.f[0].bytes = 0;
    expect_refused(&x, "'a'");
    fx_init(&x);                              /* overlapping fragments */
    x.off[1][1] = 2;
    expect_refused(&x, "overlap");
    fx_init(&x);                              /* a hole: cover 72 of 96 bytes */
    x.lsh[1][1] = 1;
    x.off[1][1] = 3;
    x.f[1].bytes = 16;
    expect_refused(&x, "cover");
    fx_init(&x);                              /* two fragments share payload bytes */
    x.f[2].object_offset = 90;
    expect_refused(&x, "share bytes");
}

static void test_bad_aliases_are_refused(void **state)
{
    (void)state;
    fx x;
    fx_init(&x);
    x.ai[0][1] = 7;
    expect_refused(&x, "does not exist");
    fx_init(&x);
    x.a[0].n_tensor_index = 1;
    expect_refused(&x, "fewer than two");
    fx_init(&x);                              /* tied with another shape */
    x.shape[2][0] = 4;
    expect_refused(&x, "'c'");
    fx_init(&x);                              /* tied with another dtype */
    x.t[2].dtype = "F16";
    expect_refused(&x, "'c'");
    fx_init(&x);                              /* a tie that has fragments of its own */
    const uint64_t ob[1] = {0}, sb[1] = {8};
    x.o[0].bytes = 128;
    x.u[0].logical_bytes = 128;
    fx_fragment(&x, 2, 1, ob, sb, 0, 112, 16);
    expect_refused(&x, "'c'");
    fx_init(&x);                              /* in two groups */
    manifest_alias_group__init(&x.a[1]);
    x.ai[1][0] = 0;
    x.ai[1][1] = 2;
    x.a[1].n_tensor_index = 2;
    x.a[1].tensor_index = x.ai[1];
    x.ap[1] = &x.a[1];
    x.msg.n_alias_groups = 2;
    expect_refused(&x, "'c'");
}

static void test_bad_objects_and_units_are_refused(void **state)
{
    (void)state;
    fx x;
    fx_init(&x);
    x.o[0].key = "weights/other/payload/0";
    expect_refused(&x, "not inside group");
    fx_init(&x);
    fx_object(&x, "payload/0", 0);
    const uint32_t u1[1] = {1};
    fx_unit(&x, 1, u1, 0);
    expect_refused(&x, "appears twice");
    fx_init(&x);
    x.u[0].logical_bytes = 111;
    expect_refused(&x, "logical bytes");
    fx_init(&x);
    fx_object(&x, "payload/1", 10);           /* in no unit */
    expect_refused(&x, "payload/1");
    fx_init(&x);
    x.ui[0][0] = 3;
    expect_refused(&x, "does not exist");
    fx_init(&x);
    x.u[0].n_object_index = 0;
    expect_refused(&x, "empty");
    fx_init(&x);                              /* the same object in two units */
    const uint32_t u0[1] = {0};
    fx_unit(&x, 1, u0, 112);
    expect_refused(&x, "two affinity units");
    fx_init(&x);                              /* a tensor spanning two units */
    fx_object(&x, "payload/1", 48);
    x.f[1].object_index = 1;
    x.f[1].object_offset = 0;
    fx_unit(&x, 1, u1, 48);
    expect_refused(&x, "'a'");
}

/* A manifest that decoded is safe to plan from: reading every tensor whole
 * stays inside the objects' declared sizes (wc_plan_apply checks every op). */
static void plan_whole_and_apply(const wc_manifest *m)
{
    uint64_t total = 0;
    for (size_t o = 0; o < m->n_objects; o++) total += m->objects[o].bytes;
    if (total > (1u << 20)) return;          /* a damaged size: too big to map here */
    wc_placement *pl = calloc(m->n_tensors + 1, sizeof *pl);
    uint8_t **objs = calloc(m->n_objects + 1, sizeof *objs);
    uint64_t *sizes = calloc(m->n_objects + 1, sizeof *sizes);
    uint8_t **bind = calloc(m->n_tensors + 1, sizeof *bind);
    for (size_t t = 0; t < m->n_tensors; t++) pl[t].kind = WC_PLACE_REPLICATED;
    for (size_t o = 0; o < m->n_objects; o++) {
        sizes[o] = m->objects[o].bytes;
        objs[o] = calloc(1, sizes[o] + 1);
    }
    wc_plan plan = {0};
    assert_int_equal(wc_plan_build(m, pl, &plan, NULL, 0), SMP_OK);
    for (size_t t = 0; t < m->n_tensors; t++) bind[t] = malloc(plan.dst_bytes[t] + 1);
    assert_int_equal(wc_plan_apply(&plan, (const uint8_t *const *)objs, sizes, m->n_objects,
                                   bind), SMP_OK);
    for (size_t t = 0; t < m->n_tensors; t++) free(bind[t]);
    for (size_t o = 0; o < m->n_objects; o++) free(objs[o]);
    wc_plan_free(&plan);
    free(bind);
    free(sizes);
    free(objs);
    free(pl);
}

/* Random damage to a valid encoding never crashes: it decodes (and then
 * validates, and plans inside its objects) or is refused with SMP_EPROTO. */
static void test_random_damage_never_crashes(void **state)
{
    (void)state;
    fx x;
    fx_init(&x);
    size_t len;
    uint8_t *orig = fx_pack(&x, &len);
    uint8_t *buf = malloc(len);
    uint32_t seed = 12345;
    int ok = 0, refused = 0;
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(buf, orig, len);
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            seed = seed * 1103515245u + 12345u;
            buf[(seed >> 8) % len] ^= (uint8_t)(1u << ((seed >> 3) & 7));
        }
        seed = seed * 1103515245u + 12345u;
        size_t cut = iter % 7 == 0 ? (seed >> 4) % len : len;
        wc_manifest m;
        char err[256];
        int rc = wc_manifest_decode(buf, cut, &m, err, sizeof err);
        if (rc == SMP_OK) {
            ok++;
            plan_whole_and_apply(&m);
            wc_manifest_free(&m);
        } else {
            assert_int_equal(rc, SMP_EPROTO);
            refused++;
        }
    }
    assert_true(refused > 0);
    assert_true(ok > 0);                     /* some damage is harmless (names, sizes) */
    free(buf);
    free(orig);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_is_byte_exact),
        cmocka_unit_test(test_object_checks_round_trip_and_are_validated),
        cmocka_unit_test(test_builder_round_trip_and_canonical_order),
        cmocka_unit_test(test_attachments_round_trip_and_rules),
        cmocka_unit_test(test_file_metadata_round_trips_and_is_validated),
        cmocka_unit_test(test_group_key_percent_encodes_components),
        cmocka_unit_test(test_sha256_is_the_standard_digest),
        cmocka_unit_test(test_undecodable_bytes_and_versions_are_refused),
        cmocka_unit_test(test_bad_tensors_are_refused),
        cmocka_unit_test(test_bad_fragments_are_refused),
        cmocka_unit_test(test_bad_aliases_are_refused),
        cmocka_unit_test(test_bad_objects_and_units_are_refused),
        cmocka_unit_test(test_random_damage_never_crashes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
