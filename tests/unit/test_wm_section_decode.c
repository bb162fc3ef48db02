/* test_wm_section_decode.c -- unit tests of the weight plugin's section
 * decoded by hand (weight_plugin/wm_section_decode.c), held against the
 * protobuf-c decode it replaced (wm_section_same.h):
 *  - real sections (the codec tests' table, a store of 300 revisions saved
 *    by wm_store_save, an empty table) and every prefix of one and every
 *    byte of one changed get the same status, sentence and image;
 *  - crafted sections: fields given twice (scalars, strings, bytes, nested
 *    messages merged as protobuf-c merges them, whole records), unknown
 *    fields of every wire type, wrong wire types, truncated and huge
 *    lengths, bad tags, embedded NULs, an empty section, and the order of
 *    refusals (bad bytes before the format, the format before records,
 *    revisions before operations whatever their order in the bytes);
 *  - a store refusing a section keeps what it held, with the sentence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weight_metadata_store.h"
#include "wm_section_same.h"
#include "wm_test_table.h"

/* ------------------------------------------------------------------------ */
/* Building sections                                                         */
/* ------------------------------------------------------------------------ */

typedef struct sb {
    uint8_t *p;
    size_t n;
    size_t cap;
} sb;

static void sb_put(sb *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void sb_byte(sb *b, uint8_t c)
{
    sb_put(b, &c, 1);
}

static void sb_varint(sb *b, uint64_t v)
{
    while (v >= 0x80) {
        sb_byte(b, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    sb_byte(b, (uint8_t)v);
}

static void sb_tag(sb *b, uint32_t field, unsigned wt)
{
    sb_varint(b, ((uint64_t)field << 3) | wt);
}

static void sb_uint(sb *b, uint32_t field, uint64_t v)
{
    sb_tag(b, field, 0);
    sb_varint(b, v);
}

static void sb_len(sb *b, uint32_t field, const void *p, size_t n)
{
    sb_tag(b, field, 2);
    sb_varint(b, n);
    sb_put(b, p, n);
}

static void sb_str(sb *b, uint32_t field, const char *s)
{
    sb_len(b, field, s, strlen(s));
}

static void sb_sub(sb *b, uint32_t field, const sb *sub)
{
    sb_len(b, field, sub->p, sub->n);
}

static void sb_msg(sb *b, uint32_t field, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *p = malloc(n + 1);
    assert_non_null(p);
    protobuf_c_message_pack(m, p);
    sb_len(b, field, p, n);
    free(p);
}

static void sb_free(sb *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* Expect both decodes to agree on b; rc (when not ANY) is the status. */
#define ANY 1
static void check_same_at(const uint8_t *p, size_t n, int rc, int line)
{
    char why[1024] = "";
    int got = 0;
    if (!wm_section_same(p, n, &got, why, sizeof(why)))
        fail_msg("line %d: the decoders differ: %s", line, why);
    if (rc != ANY && got != rc) fail_msg("line %d: status %d, expected %d", line, got, rc);
}
#define check_same(b, rc) check_same_at((b)->p, (b)->n, (rc), __LINE__)

/* The codec tests' table as a section, and as protobuf-c's messages. */
typedef struct fixture {
    wmt_table t;
    uint8_t *buf;
    size_t len;
    Wmrec__WeightMetadataSection *m;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL) return -1;
    *state = f; /* teardown frees what a failed setup leaves */
    wmt_table_build(&f->t);
    wm_section_image img = wmt_table_image(&f->t);
    if (wm_encode_section(&img, &f->buf, &f->len, NULL, 0) != WM_OK) return -1;
    f->m = wmrec__weight_metadata_section__unpack(NULL, f->len, f->buf);
    return f->m == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f == NULL) return 0;
    if (f->m != NULL) wmrec__weight_metadata_section__free_unpacked(f->m, NULL);
    free(f->buf);
    wmt_table_clear(&f->t);
    free(f);
    return 0;
}

/* The table's section rebuilt from its records, with `entry` (when not
 * NULL) in place of revision entry `at`, and `extra` (when not NULL)
 * appended at the end of the bytes. */
static void table_with(const fixture *f, size_t at, const sb *entry, const sb *extra, sb *out)
{
    const Wmrec__WeightMetadataSection *m = f->m;
    sb_uint(out, 1, m->format);
    for (size_t i = 0; i < m->n_revisions; i++) {
        if (entry != NULL && i == at)
            sb_sub(out, 2, entry);
        else
            sb_msg(out, 2, &m->revisions[i]->base);
    }
    for (size_t i = 0; i < m->n_operations; i++) sb_msg(out, 3, &m->operations[i]->base);
    for (size_t i = 0; i < m->n_leases; i++) sb_msg(out, 4, &m->leases[i]->base);
    for (size_t i = 0; i < m->n_lineages; i++) sb_msg(out, 5, &m->lineages[i]->base);
    sb_uint(out, 6, m->next_operation_id);
    sb_uint(out, 7, m->next_lease_id);
    if (extra != NULL) sb_put(out, extra->p, extra->n);
}

/* Check the table with revision entry `at` replaced by entry. */
static void check_entry_at(const fixture *f, size_t at, const sb *entry, int rc, int line)
{
    sb s = {0};
    table_with(f, at, entry, NULL, &s);
    check_same_at(s.p, s.n, rc, line);
    sb_free(&s);
}
#define check_entry(f, at, e, rc) check_entry_at((f), (at), (e), (rc), __LINE__)

/* Check the table with raw bytes appended to the section. */
static void check_appended_at(const fixture *f, const sb *extra, int rc, int line)
{
    sb s = {0};
    table_with(f, 0, NULL, extra, &s);
    check_same_at(s.p, s.n, rc, line);
    sb_free(&s);
}
#define check_appended(f, e, rc) check_appended_at((f), (e), (rc), __LINE__)

/* A field of wire type wt with a value of the right shape. */
static void sb_any(sb *b, uint32_t field, unsigned wt)
{
    sb_tag(b, field, wt);
    if (wt == 0) sb_byte(b, 1);
    if (wt == 1) sb_put(b, "\0\0\0\0\0\0\xe0\x3f", 8); /* 0.5 */
    if (wt == 2) sb_byte(b, 0);
    if (wt == 5) sb_put(b, "\0\0\0\0", 4);
}

/* The message to which entry_with appends its extra bytes. */
enum { IN_ENTRY, IN_REVISION, IN_IDENTITY, IN_POLICY, IN_SUMMARY, IN_UNIT };

/* Revision entry 0 of the table rebuilt with `extra` appended to the
 * message `where` names (the first unit for IN_UNIT). */
static void entry_with(const fixture *f, int where, const sb *extra, sb *entry)
{
    const Wmrec__RevisionEntry *e = f->m->revisions[0];
    const Wmrec__Revision *r = e->revision;
    sb id = {0}, pol = {0}, rev = {0}, unit = {0}, sum = {0};
    Wmrec__Revision rest = *r;
    rest.identity = NULL;
    rest.policy = NULL;
    sb_msg(&id, 0, &r->identity->base);
    sb_msg(&pol, 0, &r->policy->base);
    /* sb_msg framed them as field 0: keep the bodies only */
    sb body_id = {0}, body_pol = {0};
    size_t skip_id = id.n - protobuf_c_message_get_packed_size(&r->identity->base);
    size_t skip_pol = pol.n - protobuf_c_message_get_packed_size(&r->policy->base);
    sb_put(&body_id, id.p + skip_id, id.n - skip_id);
    sb_put(&body_pol, pol.p + skip_pol, pol.n - skip_pol);
    if (where == IN_IDENTITY) sb_put(&body_id, extra->p, extra->n);
    if (where == IN_POLICY) sb_put(&body_pol, extra->p, extra->n);
    sb_sub(&rev, 1, &body_id);
    sb_sub(&rev, 2, &body_pol);
    size_t n = protobuf_c_message_get_packed_size(&rest.base);
    uint8_t *p = malloc(n + 1);
    assert_non_null(p);
    protobuf_c_message_pack(&rest.base, p);
    sb_put(&rev, p, n);
    free(p);
    if (where == IN_REVISION) sb_put(&rev, extra->p, extra->n);
    const Wmrec__AffinityUnit *u0 = e->affinity->units[0];
    n = protobuf_c_message_get_packed_size(&u0->base);
    p = malloc(n + 1);
    assert_non_null(p);
    protobuf_c_message_pack(&u0->base, p);
    sb_put(&unit, p, n);
    free(p);
    if (where == IN_UNIT) sb_put(&unit, extra->p, extra->n);
    sb_sub(&sum, 1, &unit);
    for (size_t i = 1; i < e->affinity->n_units; i++) sb_msg(&sum, 1, &e->affinity->units[i]->base);
    if (where == IN_SUMMARY) sb_put(&sum, extra->p, extra->n);
    sb_sub(entry, 1, &rev);
    sb_sub(entry, 2, &sum);
    if (where == IN_ENTRY) sb_put(entry, extra->p, extra->n);
    sb_free(&id);
    sb_free(&pol);
    sb_free(&body_id);
    sb_free(&body_pol);
    sb_free(&rev);
    sb_free(&unit);
    sb_free(&sum);
}

static void check_in_at(const fixture *f, int where, const sb *extra, int rc, int line)
{
    sb entry = {0};
    entry_with(f, where, extra, &entry);
    check_entry_at(f, 0, &entry, rc, line);
    sb_free(&entry);
}
#define check_in(f, where, extra, rc) check_in_at((f), (where), (extra), (rc), __LINE__)

/* The wire type of each known field of each message (index: field). */
static const unsigned wire_of[6][26] = {
    [IN_ENTRY] = {9, 2, 2, 9},
    [IN_REVISION] = {9, 2, 2, 0, 0, 1, 0, 0, 2, 2, 2, 0, 0, 2, 0, 2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1},
    [IN_IDENTITY] = {9, 2, 2, 2, 2, 0, 9},
    [IN_POLICY] = {9, 0, 1, 0, 9},
    [IN_SUMMARY] = {9, 2, 9},
    [IN_UNIT] = {9, 2, 0, 9},
};

/* ------------------------------------------------------------------------ */
/* Real sections                                                             */
/* ------------------------------------------------------------------------ */

/* The table, a store's own section and an empty table decode the same
 * (and the table and the store's section decode at all). */
static void test_real_sections_decode_the_same(void **state)
{
    fixture *f = *state;
    check_same_at(f->buf, f->len, WM_OK, __LINE__);
    check_same_at(NULL, 0, WM_OK, __LINE__);

    wm_section_image empty;
    uint8_t *buf = NULL;
    size_t len = 0;
    memset(&empty, 0, sizeof(empty));
    empty.next_operation_id = 1;
    empty.next_lease_id = 1;
    assert_int_equal(wm_encode_section(&empty, &buf, &len, NULL, 0), WM_OK);
    check_same_at(buf, len, WM_OK, __LINE__);
    free(buf);

    wm_store *st = NULL;
    char msg[256];
    assert_int_equal(wm_store_create(&st), WM_OK);
    assert_int_equal(wmt_seed_ready(st, "m", 0, 300, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_save(st, &buf, &len, msg, sizeof(msg)), WM_OK);
    check_same_at(buf, len, WM_OK, __LINE__);
    free(buf);
    wm_store_free(st);
}

/* Every prefix of the table's section, and the section with any one byte
 * changed to 0x00, 0x01, 0x7f, 0x80, 0xff or with its low bit flipped:
 * the same verdict and sentence, the same image when it still decodes. */
static void test_every_cut_and_changed_byte_decodes_the_same(void **state)
{
    fixture *f = *state;
    static const int values[] = {0x00, 0x01, 0x7f, 0x80, 0xff, -1};
    uint8_t *mut = malloc(f->len);
    assert_non_null(mut);
    for (size_t cut = 0; cut < f->len; cut++) check_same_at(f->buf, cut, ANY, __LINE__);
    for (size_t i = 0; i < f->len; i++) {
        for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
            memcpy(mut, f->buf, f->len);
            mut[i] = values[v] < 0 ? (uint8_t)(f->buf[i] ^ 1) : (uint8_t)values[v];
            check_same_at(mut, f->len, ANY, __LINE__);
        }
    }
    free(mut);
}

/* ------------------------------------------------------------------------ */
/* Crafted sections                                                          */
/* ------------------------------------------------------------------------ */

/* Top-level fields given twice, unknown fields of each wire type, and the
 * empty and format-only sections. */
static void test_fields_twice_and_unknown_fields(void **state)
{
    fixture *f = *state;
    sb x = {0};
    /* Unknown fields of every wire type, at the top level. */
    sb_uint(&x, 99, 12345);
    sb_tag(&x, 100, 1);
    sb_put(&x, "12345678", 8);
    sb_str(&x, 101, "unknown bytes");
    sb_tag(&x, 102, 5);
    sb_put(&x, "1234", 4);
    sb_uint(&x, 1u << 28, 1); /* a 5-byte tag */
    check_appended(f, &x, WM_OK);
    sb_free(&x);
    /* The format twice: the last one counts. */
    sb_uint(&x, 1, 2);
    check_appended(f, &x, SMP_EPROTO);
    sb_uint(&x, 1, 1);
    check_appended(f, &x, WM_OK);
    sb_free(&x);
    /* next ids twice: the last counts (below an id in use: refused). */
    sb_uint(&x, 6, 1);
    check_appended(f, &x, SMP_EPROTO);
    sb_free(&x);
    sb_uint(&x, 7, 1000);
    check_appended(f, &x, WM_OK);
    sb_free(&x);
    /* A record twice: a duplicate identity, operation, lease, lineage. */
    for (int k = 0; k < 4; k++) {
        const ProtobufCMessage *rec = k == 0   ? &f->m->revisions[2]->base
                                      : k == 1 ? &f->m->operations[0]->base
                                      : k == 2 ? &f->m->leases[0]->base
                                               : &f->m->lineages[0]->base;
        sb_msg(&x, (uint32_t)(2 + k), rec);
        check_appended(f, &x, SMP_EPROTO);
        sb_free(&x);
    }
    /* An empty section body; a format alone (next ids 0: refused); an
     * empty table; a format of 0; a format in more than 32 bits (its low
     * 32 bits count). */
    check_same_at((const uint8_t *)"", 0, WM_OK, __LINE__);
    sb_uint(&x, 1, 1);
    check_same(&x, SMP_EPROTO);
    sb_uint(&x, 6, 1);
    sb_uint(&x, 7, 1);
    check_same(&x, WM_OK);
    sb_free(&x);
    sb_uint(&x, 1, 0);
    check_same(&x, SMP_EPROTO);
    sb_free(&x);
    sb_uint(&x, 1, (1ull << 32) | 1);
    sb_uint(&x, 6, 1);
    sb_uint(&x, 7, 1);
    check_same(&x, WM_OK);
    sb_free(&x);
}

/* A revision entry whose Revision comes twice: protobuf-c merges the
 * earlier into the later (the later's scalars even when it lacks them,
 * its strings when present, its bytes when present and not empty), and
 * the same for an identity or a policy twice inside one Revision. */
static void test_a_revision_given_twice_is_merged(void **state)
{
    fixture *f = *state;
    const Wmrec__RevisionEntry *e0 = f->m->revisions[0], *e2 = f->m->revisions[2];
    const Wmrec__Revision *r0 = e0->revision;
    sb entry = {0}, later = {0}, id = {0};

    /* Whole, then empty: every scalar of the later (0) wins: refused. */
    sb_msg(&entry, 1, &r0->base);
    sb_len(&entry, 1, "", 0);
    sb_msg(&entry, 2, &e0->affinity->base);
    check_entry(f, 0, &entry, SMP_EPROTO);
    sb_free(&entry);

    /* Whole, then whole again: the same revision. */
    sb_msg(&entry, 1, &r0->base);
    sb_msg(&entry, 1, &r0->base);
    sb_msg(&entry, 2, &e0->affinity->base);
    check_entry(f, 0, &entry, WM_OK);
    sb_free(&entry);

    /* Whole, then the scalars alone: the strings, bytes, identity and
     * policy of the earlier are kept. */
    Wmrec__Revision scalars = *r0;
    scalars.identity = NULL;
    scalars.policy = NULL;
    scalars.group_key = (char *)protobuf_c_empty_string;
    scalars.manifest_key = (char *)protobuf_c_empty_string;
    scalars.request_id = (char *)protobuf_c_empty_string;
    scalars.manifest_sha256.len = 0;
    scalars.manifest_sha256.data = NULL;
    scalars.payload_keys_sha256.len = 0;
    scalars.payload_keys_sha256.data = NULL;
    scalars.affinity_sha256.len = 0;
    scalars.affinity_sha256.data = NULL;
    sb_msg(&entry, 1, &r0->base);
    sb_msg(&entry, 1, &scalars.base);
    sb_msg(&entry, 2, &e0->affinity->base);
    check_entry(f, 0, &entry, WM_OK);
    sb_free(&entry);

    /* The later with an empty group key given (a string present wins,
     * empty or not) and an empty digest given (empty bytes do not win). */
    sb_str(&later, 8, "");
    sb_len(&later, 10, "", 0);
    sb_msg(&entry, 1, &r0->base);
    sb_sub(&entry, 1, &later);
    sb_msg(&entry, 2, &e0->affinity->base);
    check_entry(f, 0, &entry, SMP_EPROTO);
    sb_free(&entry);
    sb_free(&later);

    /* The later with only an empty digest: the earlier's digest stays. */
    sb_len(&later, 10, "", 0);
    sb_msg(&entry, 1, &r0->base);
    sb_sub(&entry, 1, &later);
    sb_msg(&entry, 2, &e0->affinity->base);
    check_entry(f, 0, &entry, SMP_EPROTO); /* the later's scalars are 0 */
    sb_free(&entry);
    sb_free(&later);
    Wmrec__Revision no_digest = scalars;
    no_digest.identity = r0->identity;
    no_digest.policy = r0->policy;
    no_digest.group_key = r0->group_key;
    no_digest.manifest_key = r0->manifest_key;
    sb_msg(&entry, 1, &r0->base);
    sb_msg(&entry, 1, &no_digest.base);
    sb_len(&entry, 1, "\x52\x00", 2); /* field 10, empty */
    sb_msg(&entry, 2, &e0->affinity->base);
    check_entry(f, 0, &entry, SMP_EPROTO); /* scalars 0 again */
    sb_free(&entry);

    /* Inside one Revision: an identity given again with only its
     * generation and an empty tenant keeps the earlier's strings; a policy
     * given again empty has the later's scalars (0: refused). */
    sb_uint(&id, 5, r0->identity->weight_generation);
    sb_len(&id, 1, "", 0);
    sb_sub(&later, 1, &id);
    check_in(f, IN_REVISION, &later, WM_OK);
    sb_free(&later);
    sb_free(&id);
    sb_uint(&id, 5, r0->identity->weight_generation + 1);
    sb_sub(&later, 1, &id);
    check_in(f, IN_REVISION, &later, SMP_EPROTO);
    sb_free(&later);
    sb_free(&id);
    sb_len(&later, 2, "", 0);
    check_in(f, IN_REVISION, &later, SMP_EPROTO);
    sb_free(&later);
    sb_msg(&later, 2, &r0->policy->base);
    check_in(f, IN_REVISION, &later, WM_OK);
    sb_free(&later);
    /* and digests, keys and strings given again inside one Revision: the
     * last value, an empty digest included (refused: READY needs them). */
    sb_len(&later, 10, "", 0);
    check_in(f, IN_REVISION, &later, ANY);
    sb_free(&later);
    sb_str(&later, 9, r0->manifest_key);
    check_in(f, IN_REVISION, &later, WM_OK);
    sb_free(&later);

    /* The summary given twice: its units concatenated (a member twice:
     * refused); given empty after the real one: the same summary. */
    sb_msg(&entry, 1, &r0->base);
    sb_msg(&entry, 2, &e0->affinity->base);
    sb_msg(&entry, 2, &e0->affinity->base);
    check_entry(f, 0, &entry, SMP_EPROTO);
    sb_free(&entry);
    sb_msg(&entry, 2, &e0->affinity->base);
    sb_msg(&entry, 1, &r0->base);
    sb_len(&entry, 2, "", 0);
    check_entry(f, 0, &entry, WM_OK);
    sb_free(&entry);
    /* An IMPORTING revision given an empty summary: refused (no unit). */
    sb_msg(&entry, 1, &e2->revision->base);
    sb_len(&entry, 2, "", 0);
    check_entry(f, 2, &entry, SMP_EPROTO);
    sb_free(&entry);
    /* An entry without a revision. */
    check_entry(f, 2, &entry, SMP_EPROTO);
}

/* Every known field of every message of a revision entry given again with
 * each wire type: the wrong ones do not decode, the right ones decode as
 * the reference does (a changed value, refused or not). */
static void test_wrong_wire_types_do_not_decode(void **state)
{
    fixture *f = *state;
    static const uint32_t n_fields[6] = {2, 25, 5, 3, 1, 2};
    for (int where = IN_ENTRY; where <= IN_UNIT; where++) {
        for (uint32_t field = 1; field <= n_fields[where]; field++) {
            for (unsigned wt = 0; wt <= 5; wt++) {
                if (wt == 3 || wt == 4) continue;
                sb x = {0};
                sb_any(&x, field, wt);
                check_in(f, where, &x, wt == wire_of[where][field] ? ANY : SMP_EPROTO);
                sb_free(&x);
            }
        }
        /* and an unknown field of each wire type is skipped */
        for (unsigned wt = 0; wt <= 5; wt++) {
            if (wt == 3 || wt == 4) continue;
            sb x = {0};
            sb_any(&x, 500, wt);
            check_in(f, where, &x, WM_OK);
            sb_free(&x);
        }
    }
    /* The top level: a record as a varint, the format as bytes, an id as
     * a fixed64. */
    sb x = {0};
    for (uint32_t field = 2; field <= 5; field++) {
        sb_uint(&x, field, 1);
        check_appended(f, &x, SMP_EPROTO);
        sb_free(&x);
    }
    sb_str(&x, 1, "1");
    check_appended(f, &x, SMP_EPROTO);
    sb_free(&x);
    sb_any(&x, 6, 1);
    check_appended(f, &x, SMP_EPROTO);
    sb_free(&x);
}

/* Bad tags, varints and lengths, at the top level and inside a revision:
 * wire types 3, 4, 6, 7, field 0, a tag or length prefix too long, a
 * varint of 11 bytes, a length above INT_MAX or past the end, a fixed
 * field cut short. */
static void test_bad_framing_does_not_decode(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *bytes;
        size_t n;
    } bad[] = {
        {"\x0b", 1},                                 /* field 1, wire type 3 */
        {"\x0c", 1},                                 /* wire type 4 */
        {"\x0e\x01", 2},                             /* wire type 6 */
        {"\x0f\x01", 2},                             /* wire type 7 */
        {"\x00\x01", 2},                             /* field 0 */
        {"\x07\x01", 2},                             /* field 0, wire type 7 */
        {"\x80\x80\x80\x80\x80\x08\x01", 7},         /* a 6-byte tag */
        {"\x88\x80\x80\x80\x80", 5},                 /* a tag without its end */
        {"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 11}, /* 11-byte varint */
        {"\x08\x80\x80", 3},                         /* a varint cut short */
        {"\xa2\x01\x80\x80\x80\x80\x08", 7},         /* field 20: length 2^31 */
        {"\xa2\x01\x80\x80\x80\x80\x80\x01", 8},     /* a 6-byte length prefix */
        {"\xa2\x01\x05\x01\x02", 5},                 /* a length past the end */
        {"\xa1\x01\x01\x02\x03", 5},                 /* a fixed64 cut short */
        {"\xa5\x01\x01\x02", 4},                     /* a fixed32 cut short */
        {"\xa2\x01\x80\x80\x80\x80", 6},             /* a length prefix cut short */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sb x = {0};
        sb_put(&x, bad[i].bytes, bad[i].n);
        check_appended(f, &x, SMP_EPROTO);
        for (int where = IN_ENTRY; where <= IN_UNIT; where++) check_in(f, where, &x, SMP_EPROTO);
        sb_free(&x);
    }
    /* Good framing for contrast: a 10-byte varint (value past 64 bits), a
     * 5-byte length prefix, an unknown field of length 0. */
    sb x = {0};
    sb_put(&x, "\xf0\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 12); /* field 30 */
    sb_put(&x, "\xf2\x01\x82\x80\x80\x80\x00xy", 9);
    sb_put(&x, "\xf2\x01\x00", 3);
    check_appended(f, &x, WM_OK);
    for (int where = IN_ENTRY; where <= IN_UNIT; where++) check_in(f, where, &x, WM_OK);
    sb_free(&x);
}

/* Strings with an embedded NUL or bad UTF-8: a key, an identity part, a
 * member, the request id -- the same refusal or the same value cut at the
 * NUL. */
static void test_embedded_nuls_decode_the_same(void **state)
{
    fixture *f = *state;
    const Wmrec__Revision *r = f->m->revisions[0]->revision;
    static const char tail[] = "\0tail";
    const struct {
        int where;
        uint32_t field;
        const char *s;
    } cases[] = {
        {IN_REVISION, 8, r->group_key},  {IN_REVISION, 9, r->manifest_key},
        {IN_REVISION, 20, "req-1"},      {IN_IDENTITY, 1, "tenant-a"},
        {IN_IDENTITY, 4, "main"},        {IN_UNIT, 1, f->t.aff[0].units[0].members[0]},
        {IN_REVISION, 20, ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sb x = {0}, v = {0};
        sb_put(&v, cases[i].s, strlen(cases[i].s));
        sb_put(&v, tail, sizeof(tail) - 1);
        sb_sub(&x, cases[i].field, &v);
        check_in(f, cases[i].where, &x, ANY);
        sb_free(&x);
        sb_len(&x, cases[i].field, "\xc3\x28", 2); /* bad UTF-8 */
        check_in(f, cases[i].where, &x, SMP_EPROTO);
        sb_free(&x);
        sb_free(&v);
    }
}

/* Which refusal wins: bytes that do not decode over a bad format, a bad
 * format over bad records, a revision over an operation before it in the
 * bytes, with the sentences the reference gives. */
static void test_refusals_come_in_the_reference_order(void **state)
{
    fixture *f = *state;
    char msg[256];
    wm_section_image img;
    sb s = {0}, x = {0};
    const Wmrec__RevisionEntry *e2 = f->m->revisions[2];

    /* Format 2 and a revision entry that does not decode. */
    sb_uint(&s, 1, 2);
    sb_msg(&s, 2, &e2->base);
    sb_len(&s, 2, "\x0a\x05\x01", 3);
    check_same(&s, SMP_EPROTO);
    assert_int_equal(wm_decode_section(s.p, s.n, &img, msg, sizeof(msg)), SMP_EPROTO);
    assert_string_equal(msg, "section weight_metadata does not decode");
    sb_free(&s);

    /* Format 2 and a revision that is refused: the format. */
    Wmrec__Revision bad = *e2->revision;
    bad.availability = 99;
    Wmrec__RevisionEntry bad_entry = *e2;
    bad_entry.revision = &bad;
    sb_uint(&s, 1, 2);
    sb_msg(&s, 2, &bad_entry.base);
    check_same(&s, SMP_EPROTO);
    assert_int_equal(wm_decode_section(s.p, s.n, &img, msg, sizeof(msg)), SMP_EPROTO);
    assert_non_null(strstr(msg, "format 2"));
    sb_free(&s);

    /* A refused operation before a refused revision in the bytes: the
     * revision's refusal; then a lease before an operation: the
     * operation's. */
    Wmrec__Operation bad_op = *f->m->operations[0];
    bad_op.kind = 99;
    Wmrec__Lease bad_lease = *f->m->leases[0];
    bad_lease.identity = NULL;
    sb_uint(&s, 1, 1);
    sb_msg(&s, 3, &bad_op.base);
    sb_msg(&s, 2, &bad_entry.base);
    check_same(&s, SMP_EPROTO);
    assert_int_equal(wm_decode_section(s.p, s.n, &img, msg, sizeof(msg)), SMP_EPROTO);
    assert_non_null(strstr(msg, "availability 99"));
    sb_free(&s);
    sb_uint(&s, 1, 1);
    sb_msg(&s, 4, &bad_lease.base);
    sb_msg(&s, 3, &bad_op.base);
    check_same(&s, SMP_EPROTO);
    assert_int_equal(wm_decode_section(s.p, s.n, &img, msg, sizeof(msg)), SMP_EPROTO);
    assert_non_null(strstr(msg, "kind 99"));
    sb_free(&s);

    /* Refused records, then bytes that do not decode at the very end. */
    sb_uint(&s, 1, 1);
    sb_msg(&s, 2, &bad_entry.base);
    sb_msg(&s, 3, &bad_op.base);
    sb_byte(&s, 0x0b);
    check_same(&s, SMP_EPROTO);
    assert_int_equal(wm_decode_section(s.p, s.n, &img, msg, sizeof(msg)), SMP_EPROTO);
    assert_string_equal(msg, "section weight_metadata does not decode");
    sb_free(&s);

    /* An operation that does not decode after a good table. */
    sb_len(&x, 3, "\x12\x03\x0a", 3);
    check_appended(f, &x, SMP_EPROTO);
    sb_free(&x);
}

/* A store asked to load a refused section keeps the table it held and
 * says why; the same store then loads a good one. */
static void test_store_keeps_its_table_when_a_section_is_refused(void **state)
{
    fixture *f = *state;
    wm_store *st = NULL;
    char msg[256] = "";
    uint8_t *good = NULL;
    size_t good_len = 0;
    assert_int_equal(wm_store_create(&st), WM_OK);
    assert_int_equal(wmt_seed_ready(st, "keep", 0, 5, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_save(st, &good, &good_len, msg, sizeof(msg)), WM_OK);

    sb s = {0};
    table_with(f, 0, NULL, NULL, &s);
    sb_byte(&s, 0x0b); /* wire type 3 */
    assert_int_equal(wm_store_load(st, s.p, s.n, msg, sizeof(msg)), SMP_EPROTO);
    assert_string_equal(msg, "section weight_metadata does not decode");
    assert_int_equal(wm_store_revision_count(st), 5);
    sb_free(&s);

    sb_uint(&s, 1, 1);
    sb_msg(&s, 2, &f->m->revisions[2]->base);
    sb_msg(&s, 2, &f->m->revisions[2]->base);
    assert_int_equal(wm_store_load(st, s.p, s.n, msg, sizeof(msg)), SMP_EPROTO);
    assert_non_null(strstr(msg, "section weight_metadata: "));
    assert_int_equal(wm_store_revision_count(st), 5);
    sb_free(&s);

    assert_int_equal(wm_store_load(st, f->buf, f->len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_revision_count(st), 3);
    assert_int_equal(wm_store_operation_count(st), 2);
    assert_int_equal(wm_store_lease_count(st), 1);
    assert_int_equal(wm_store_load(st, good, good_len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_revision_count(st), 5);
    free(good);
    wm_store_free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_sections_decode_the_same),
        cmocka_unit_test(test_every_cut_and_changed_byte_decodes_the_same),
        cmocka_unit_test(test_fields_twice_and_unknown_fields),
        cmocka_unit_test(test_a_revision_given_twice_is_merged),
        cmocka_unit_test(test_wrong_wire_types_do_not_decode),
        cmocka_unit_test(test_bad_framing_does_not_decode),
        cmocka_unit_test(test_embedded_nuls_decode_the_same),
        cmocka_unit_test(test_refusals_come_in_the_reference_order),
        cmocka_unit_test(test_store_keeps_its_table_when_a_section_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
