/* test_wm_identity.c -- the value contracts of weight_management.h.
 *
 * Identity and lineage validation (empty, too long, bad UTF-8, NUL, keys
 * above the host's limit), percent-encoding and canonical keys with their
 * strict parser (round trips through '/', '@', '%', spaces and non-ASCII,
 * refusal of every non-canonical spelling), enum and error names, policy
 * validation and precedence, and the sealing digests and affinity checks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "utf8_offsets.h"
#include "weight_management.h"
#include "wm_test_records.h"

/* wm_identity_set and wm_key_parse into a plain identity whose strings
 * live as long as the program (wmt_intern), so the tests below read like
 * the value they check. */
static int set_id(wm_identity *id, const char *t, const char *n, const char *r, const char *v,
                  uint64_t gen)
{
    wm_identity_buf b;
    int rc = wm_identity_set(&b, t, n, r, v, gen);
    if (rc == WM_OK) {
        *id = b.id;
        wmt_identity_keep(id);
    }
    return rc;
}

static int parse_key(const char *key, wm_identity *id, wm_key_kind *kind, uint64_t *n)
{
    wm_identity_buf b;
    int rc = wm_key_parse(key, &b, kind, n);
    if (rc == WM_OK) {
        *id = b.id;
        wmt_identity_keep(id);
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Identity validation                                                       */
/* ------------------------------------------------------------------------ */

static void test_identity_accepts_a_plain_identity(void **state)
{
    (void)state;
    wm_identity id;
    char msg[160];
    assert_int_equal(set_id(&id, "default", "llm", "llama-3-8b", "main", 7), WM_OK);
    assert_int_equal(wm_identity_check(&id, msg, sizeof(msg)), WM_OK);
    assert_string_equal(id.ns, "llm");
    assert_int_equal(id.weight_generation, 7);
}

static void test_identity_refuses_empty_components(void **state)
{
    (void)state;
    wm_identity id;
    char msg[160] = "";
    assert_int_equal(set_id(&id, "", "llm", "r", "main", 1), WM_EINVALID_ARGUMENT);
    assert_int_equal(set_id(&id, "t", "", "r", "main", 1), WM_EINVALID_ARGUMENT);
    assert_int_equal(set_id(&id, "t", "llm", "", "main", 1), WM_EINVALID_ARGUMENT);
    assert_int_equal(set_id(&id, "t", "llm", "r", "", 1), WM_EINVALID_ARGUMENT);
    assert_int_equal(set_id(&id, "t", NULL, "r", "main", 1), WM_EINVALID_ARGUMENT);
    wmt_identity(&id, "r", 1);
    id.ns = "";
    assert_int_equal(wm_identity_check(&id, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "namespace"));
}

static void test_identity_refuses_too_long_components(void **state)
{
    (void)state;
    char big[WM_ID_COMPONENT_MAX + 2];
    wm_identity id;
    memset(big, 'x', sizeof(big));
    big[WM_ID_COMPONENT_MAX + 1] = '\0'; /* 257 bytes */
    assert_int_equal(set_id(&id, "t", "n", big, "main", 1), WM_EINVALID_ARGUMENT);
    big[WM_ID_COMPONENT_MAX] = '\0'; /* 256 bytes: allowed alone */
    assert_int_equal(set_id(&id, "t", "n", big, "main", 1), WM_OK);
    /* Two components of 256 bytes that each encode to 768 bytes do not fit
     * the host's 1024-byte key limit, though each is valid on its own. */
    char wide[WM_ID_COMPONENT_MAX + 1];
    memset(wide, '@', WM_ID_COMPONENT_MAX);
    wide[WM_ID_COMPONENT_MAX] = '\0';
    assert_int_equal(set_id(&id, wide, "n", "r", "main", 1), WM_OK);
    assert_int_equal(set_id(&id, wide, wide, "r", "main", 1), WM_EINVALID_ARGUMENT);
    char msg[200];
    wmt_identity(&id, "r", 1);
    id.tenant_id = wide;
    id.revision = wide;
    assert_int_equal(wm_identity_check(&id, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "key limit"));
}

static void test_identity_refuses_bad_utf8_and_nul(void **state)
{
    (void)state;
    wm_identity id;
    /* A lone continuation byte, an overlong '/', a surrogate, above U+10FFFF,
     * a truncated sequence. */
    const char *bad[] = {"a\x80", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "ab\xE2\x82"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(set_id(&id, "t", "n", bad[i], "main", 1), WM_EINVALID_ARGUMENT);
        assert_int_equal(wm_component_check(bad[i], strlen(bad[i])), WM_EINVALID_ARGUMENT);
    }
    assert_int_equal(wm_component_check("a\0b", 3), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_component_check("\xE2\x82\xAC", 3), WM_OK);       /* euro sign */
    assert_int_equal(wm_component_check("\xF0\x9F\x98\x80", 4), WM_OK);   /* emoji */
    assert_int_equal(wm_text_check("", 0), WM_OK);
    assert_int_equal(wm_text_check("x\0", 2), WM_EINVALID_ARGUMENT);
}

/* A bad or good multi-byte sequence is judged alike at every offset of an
 * ASCII run (the check takes eight ASCII bytes at a time). */
static int text_accepts(const char *s, size_t len)
{
    return wm_text_check(s, len) == WM_OK;
}

static void test_utf8_judged_alike_at_every_offset(void **state)
{
    (void)state;
    char why[128];
    if (utf8_judged_at_every_offset(text_accepts, why, sizeof(why)) != 0) fail_msg("%s", why);
}

/* The key-length check counts each byte as percent-encoding writes it:
 * one for an unreserved ASCII byte (A-Z a-z 0-9 - . _ ~), three for any
 * other byte, a multi-byte UTF-8 character three per byte. With 256 + 256 +
 * 200 unreserved bytes in the first three strings, a revision of 100
 * copies of one byte fits the 1024-byte key limit when that byte encodes to
 * one byte and not when it encodes to three (and wm_pct_encode agrees). */
static void test_key_length_counts_every_byte_as_encoded(void **state)
{
    (void)state;
    char a256[257], a200[201], rev[301], enc[1024], msg[200];
    memset(a256, 'a', 256);
    a256[256] = '\0';
    memset(a200, 'a', 200);
    a200[200] = '\0';
    for (int c = 1; c < 0x80; c++) {
        memset(rev, c, 100);
        rev[100] = '\0';
        wm_identity id = {a256, a256, a200, rev, 1};
        int unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                         (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
        assert_int_equal(wm_identity_check(&id, msg, sizeof(msg)),
                         unreserved ? WM_OK : WM_EINVALID_ARGUMENT);
        if (!unreserved) assert_non_null(strstr(msg, "key limit"));
        assert_int_equal(wm_pct_encode(rev, 1, enc, sizeof(enc)), unreserved ? 1 : 3);
    }
    /* 50 two-byte characters: 100 bytes, 300 encoded */
    for (int i = 0; i < 50; i++) memcpy(rev + 2 * i, "\xC3\xA9", 2);
    rev[100] = '\0';
    wm_identity id = {a256, a256, a200, rev, 1};
    assert_int_equal(wm_identity_check(&id, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "key limit"));
    rev[2] = '\0'; /* one of them: fits */
    assert_int_equal(wm_identity_check(&id, msg, sizeof(msg)), WM_OK);
    /* bad UTF-8 after a run of ASCII, and between two good characters */
    wm_identity bad = {"t", "n", "abc\xC3", "main", 1};
    assert_int_equal(wm_identity_check(&bad, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "resource_id is not valid UTF-8"));
    bad.resource_id = "\xC3\xA9x\xA9\xC3\xA9";
    assert_int_equal(wm_identity_check(&bad, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    bad.resource_id = "\xC3\xA9x\xE2\x82\xAC";
    assert_int_equal(wm_identity_check(&bad, msg, sizeof(msg)), WM_OK);
}

static void test_identity_order_and_lineage(void **state)
{
    (void)state;
    wm_identity a, b;
    wm_lineage la;
    wmt_identity(&a, "r", 1);
    wmt_identity(&b, "r", 2);
    assert_true(wm_identity_cmp(&a, &b) < 0);
    assert_true(wm_identity_cmp(&b, &a) > 0);
    assert_int_equal(wm_identity_cmp(&a, &a), 0);
    wm_identity_lineage(&a, &la);
    assert_true(wm_identity_in_lineage(&b, &la));
    assert_int_equal(wm_lineage_check(&la, NULL, 0), WM_OK);
    wmt_identity(&b, "s", 1);
    assert_false(wm_identity_in_lineage(&b, &la));
    wm_identity c;
    wm_lineage_identity(&la, 9, &c);
    assert_int_equal(c.weight_generation, 9);
    assert_string_equal(c.resource_id, "r");
}

/* ------------------------------------------------------------------------ */
/* Keys                                                                      */
/* ------------------------------------------------------------------------ */

static void test_pct_encoding_passes_unreserved_only(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(wm_pct_encode("aZ09-._~", 8, out, sizeof(out)), 8);
    assert_string_equal(out, "aZ09-._~");
    assert_int_equal(wm_pct_encode("a/b@c%d e", 9, out, sizeof(out)), 17);
    assert_string_equal(out, "a%2Fb%40c%25d%20e");
    assert_int_equal(wm_pct_encode("\xC3\xA9\n", 3, out, sizeof(out)), 9);
    assert_string_equal(out, "%C3%A9%0A");
    /* Too small a buffer is refused, never overrun. */
    assert_int_equal(wm_pct_encode("a/b", 3, out, 4), WM_EINVALID_ARGUMENT);
}

static void test_pct_decoding_is_strict(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(wm_pct_decode("a%2Fb%40", 8, out, sizeof(out)), 4);
    assert_string_equal(out, "a/b@");
    assert_int_equal(wm_pct_decode("a%2fb", 5, out, sizeof(out)), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_pct_decode("%41", 3, out, sizeof(out)), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_pct_decode("a%2", 3, out, sizeof(out)), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_pct_decode("a%G0", 4, out, sizeof(out)), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_pct_decode("a/b", 3, out, sizeof(out)), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_pct_decode("a b", 3, out, sizeof(out)), WM_EINVALID_ARGUMENT);
}

static void test_canonical_keys(void **state)
{
    (void)state;
    wm_identity id;
    char key[WM_KEY_MAX + 1];
    assert_int_equal(set_id(&id, "acme", "llm", "llama-3-8b", "main", 42), WM_OK);
    assert_true(wm_group_key(&id, key, sizeof(key)) > 0);
    assert_string_equal(key, "weights/acme/llm/llama-3-8b/main/42");
    assert_true(wm_manifest_key(&id, key, sizeof(key)) > 0);
    assert_string_equal(key, "weights/acme/llm/llama-3-8b/main/42/manifest");
    assert_true(wm_payload_key(&id, 17, key, sizeof(key)) > 0);
    assert_string_equal(key, "weights/acme/llm/llama-3-8b/main/42/payload/17");
    assert_int_equal(wm_group_key(&id, key, 10), WM_EINVALID_ARGUMENT);
}

static void test_key_round_trips_with_special_characters(void **state)
{
    (void)state;
    const char *tenants[] = {"a/b", "user@example.com", "100%", "caf\xC3\xA9", "\xE6\xA8\xA1\xE5\x9E\x8B",
                             "sp ace", "..", "~x_y.z-1"};
    for (size_t i = 0; i < sizeof(tenants) / sizeof(tenants[0]); i++) {
        wm_identity id, back;
        wm_key_kind kind;
        uint64_t n = 0;
        char key[WM_KEY_MAX + 1];
        assert_int_equal(set_id(&id, tenants[i], "ns/x", "r@1", "rev%2", UINT64_MAX), WM_OK);

        assert_true(wm_group_key(&id, key, sizeof(key)) > 0);
        assert_int_equal(parse_key(key, &back, &kind, &n), WM_OK);
        assert_int_equal(kind, WM_KEY_GROUP);
        assert_int_equal(wm_identity_cmp(&id, &back), 0);
        /* Exactly five separators after the prefix: no raw '/' leaks. */
        size_t slashes = 0;
        for (const char *p = key; *p; p++) slashes += *p == '/';
        assert_int_equal(slashes, 5);

        assert_true(wm_manifest_key(&id, key, sizeof(key)) > 0);
        assert_int_equal(parse_key(key, &back, &kind, NULL), WM_OK);
        assert_int_equal(kind, WM_KEY_MANIFEST);
        assert_int_equal(wm_identity_cmp(&id, &back), 0);

        assert_true(wm_payload_key(&id, 123456, key, sizeof(key)) > 0);
        assert_int_equal(parse_key(key, &back, &kind, &n), WM_OK);
        assert_int_equal(kind, WM_KEY_PAYLOAD);
        assert_int_equal(n, 123456);
        assert_int_equal(wm_identity_cmp(&id, &back), 0);
    }
}

static void test_key_parse_refuses_non_canonical_keys(void **state)
{
    (void)state;
    wm_identity id;
    wm_key_kind kind;
    const char *bad[] = {
        "",
        "weights",
        "weights/a/b/c/d",
        "weight/a/b/c/d/1",
        "weights/a/b/c/d/01",
        "weights/a/b/c/d/-1",
        "weights/a/b/c/d/18446744073709551616",
        "weights/a/b/c/d/1/",
        "weights/a/b/c/d/1/manifesto",
        "weights/a/b/c/d/1/payload",
        "weights/a/b/c/d/1/payload/",
        "weights/a/b/c/d/1/payload/07",
        "weights/a/b/c/d/1/payload/1/x",
        "weights//b/c/d/1",
        "weights/a%2fb/b/c/d/1",
        "weights/%61/b/c/d/1",
        "weights/a@b/b/c/d/1",
        "weights/a/b/c/%FF/1",
        "weights/a/b/c/%00/1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(parse_key(bad[i], &id, &kind, NULL), WM_EINVALID_ARGUMENT);
    assert_int_equal(parse_key("weights/a/b/c/d/0", &id, &kind, NULL), WM_OK);
    assert_int_equal(parse_key(NULL, &id, &kind, NULL), WM_EINVALID_ARGUMENT);
}

/* ------------------------------------------------------------------------ */
/* Names                                                                     */
/* ------------------------------------------------------------------------ */

static void test_enum_names_round_trip(void **state)
{
    (void)state;
    for (int v = WM_AVAIL_IMPORTING; v <= WM_AVAIL_DELETED; v++) {
        wm_availability back;
        assert_int_equal(wm_availability_from_name(wm_availability_name(v), &back), WM_OK);
        assert_int_equal(back, v);
    }
    for (int v = WM_RES_UNKNOWN; v <= WM_RES_ABSENT; v++) {
        wm_residency back;
        assert_int_equal(wm_residency_from_name(wm_residency_name(v), &back), WM_OK);
        assert_int_equal(back, v);
    }
    assert_string_equal(wm_availability_name(WM_AVAIL_DEGRADED), "DEGRADED");
    assert_string_equal(wm_residency_name(WM_RES_MIXED), "MIXED");
    assert_string_equal(wm_mode_name(WM_MODE_PINNED), "PINNED");
    assert_string_equal(wm_op_kind_name(WM_OPK_REPAIRING), "REPAIRING");
    assert_string_equal(wm_op_state_name(WM_OPS_FAILED), "FAILED");
    assert_string_equal(wm_upsert_mode_name(WM_UPSERT_DELETE_FIRST), "DELETE_FIRST");
    assert_string_equal(wm_phase_name(WM_PHASE_DRAINING_BASE), "DRAINING_BASE");
    assert_string_equal(wm_availability_name(0), "?");
    assert_string_equal(wm_residency_name(99), "?");
    assert_string_equal(wm_phase_name(-1), "?");
    wm_migration_mode m;
    assert_int_equal(wm_mode_from_name("auto", &m), WM_OK);
    assert_int_equal(m, WM_MODE_AUTO);
    assert_int_equal(wm_mode_from_name("sometimes", &m), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_mode_from_name(NULL, &m), WM_EINVALID_ARGUMENT);
    wm_op_kind k;
    assert_int_equal(wm_op_kind_from_name("Importing", &k), WM_OK);
    assert_int_equal(k, WM_OPK_IMPORTING);
    wm_upsert_mode u;
    assert_int_equal(wm_upsert_mode_from_name("put_first", &u), WM_OK);
    assert_int_equal(u, WM_UPSERT_PUT_FIRST);
}

static void test_error_names(void **state)
{
    (void)state;
    assert_string_equal(wm_error_name(WM_ESTALE_GENERATION), "STALE_GENERATION");
    assert_string_equal(wm_error_name(WM_EPOLICY_UNSATISFIABLE), "POLICY_UNSATISFIABLE");
    assert_string_equal(wm_error_name(WM_EINVALID_ARGUMENT), "INVALID_ARGUMENT");
    assert_string_equal(wm_error_name(WM_OK), "OK");
    assert_string_equal(wm_error_name(SMP_EPROTO), "SMP_EPROTO");
}

/* ------------------------------------------------------------------------ */
/* Policy                                                                    */
/* ------------------------------------------------------------------------ */

static void test_policy_default_is_mixed_half_auto(void **state)
{
    (void)state;
    wm_policy p = wm_policy_default();
    assert_int_equal(p.preferred, WM_RES_MIXED);
    assert_true(p.mixed_hot_ratio == 0.5);
    assert_int_equal(p.mode, WM_MODE_AUTO);
    assert_int_equal(wm_policy_check(&p, NULL, 0), WM_OK);
}

static void test_policy_refuses_bad_ratios_and_states(void **state)
{
    (void)state;
    char msg[160];
    wm_policy p = wm_policy_default();
    const double bad[] = {0.0, 1.0, -0.1, 1.5, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p.mixed_hot_ratio = bad[i];
        assert_int_equal(wm_policy_check(&p, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
        assert_non_null(strstr(msg, "mixed_hot_ratio"));
    }
    p.mixed_hot_ratio = 0.000001;
    assert_int_equal(wm_policy_check(&p, NULL, 0), WM_OK);
    p.preferred = WM_RES_UNKNOWN;
    assert_int_equal(wm_policy_check(&p, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "preferred_residency"));
    p.preferred = WM_RES_ABSENT;
    assert_int_equal(wm_policy_check(&p, NULL, 0), WM_EINVALID_ARGUMENT);
    p.preferred = WM_RES_HOT;
    p.mode = (wm_migration_mode)0;
    assert_int_equal(wm_policy_check(&p, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "migration_mode"));
    assert_int_equal(wm_policy_check(NULL, NULL, 0), WM_EINVALID_ARGUMENT);
}

static void test_policy_from_config_names(void **state)
{
    (void)state;
    wm_policy p;
    char msg[160];
    assert_int_equal(wm_policy_from_names("mixed", 0.25, "manual", &p, msg, sizeof(msg)), WM_OK);
    assert_int_equal(p.preferred, WM_RES_MIXED);
    assert_int_equal(p.mode, WM_MODE_MANUAL);
    assert_int_equal(wm_policy_from_names("HOT", 0.5, "PINNED", &p, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_policy_from_names("lukewarm", 0.5, "auto", &p, msg, sizeof(msg)),
                     WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "lukewarm"));
    assert_int_equal(wm_policy_from_names("absent", 0.5, "auto", &p, msg, sizeof(msg)),
                     WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_policy_from_names("cold", 0.5, "never", &p, msg, sizeof(msg)),
                     WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "never"));
    assert_int_equal(wm_policy_from_names("cold", 1.5, "auto", &p, msg, sizeof(msg)),
                     WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "1.5"));
}

static void test_policy_precedence_call_client_cluster(void **state)
{
    (void)state;
    wm_policy call = {WM_RES_HOT, 0.5, WM_MODE_PINNED};
    wm_policy client = {WM_RES_COLD, 0.5, WM_MODE_MANUAL};
    wm_policy cluster = {WM_RES_MIXED, 0.3, WM_MODE_AUTO};
    wm_policy out;
    assert_int_equal(wm_policy_resolve(&call, &client, &cluster, &out), WM_OK);
    assert_int_equal(out.preferred, WM_RES_HOT);
    assert_int_equal(wm_policy_resolve(NULL, &client, &cluster, &out), WM_OK);
    assert_int_equal(out.preferred, WM_RES_COLD);
    assert_int_equal(out.mode, WM_MODE_MANUAL);
    assert_int_equal(wm_policy_resolve(NULL, NULL, &cluster, &out), WM_OK);
    assert_true(out.mixed_hot_ratio == 0.3);
    assert_int_equal(wm_policy_resolve(NULL, NULL, NULL, &out), WM_EINVALID_ARGUMENT);
    /* An invalid call policy is an error, not a reason to fall back. */
    wm_policy bad = call;
    bad.mixed_hot_ratio = 1.0;
    out.preferred = WM_RES_UNKNOWN;
    assert_int_equal(wm_policy_resolve(&bad, &client, &cluster, &out), WM_EINVALID_ARGUMENT);
    assert_int_equal(out.preferred, WM_RES_UNKNOWN);
}

/* ------------------------------------------------------------------------ */
/* Digests and affinity                                                      */
/* ------------------------------------------------------------------------ */

static void test_payload_digest_ignores_order(void **state)
{
    (void)state;
    const char *a[] = {"k/2", "k/1", "k/3"};
    const char *b[] = {"k/1", "k/3", "k/2"};
    const char *c[] = {"k/1", "k/3"};
    uint8_t da[32], db[32], dc[32];
    assert_int_equal(wm_payload_keys_digest(a, 3, da), WM_OK);
    assert_int_equal(wm_payload_keys_digest(b, 3, db), WM_OK);
    assert_int_equal(wm_payload_keys_digest(c, 2, dc), WM_OK);
    assert_memory_equal(da, db, 32);
    assert_memory_not_equal(da, dc, 32);
    const char *nl[] = {"a\nb"};
    assert_int_equal(wm_payload_keys_digest(nl, 1, da), WM_EINVALID_ARGUMENT);
    /* The empty set has the SHA-256 of nothing. */
    static const uint8_t empty[32] = {0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14,
                                      0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
                                      0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c,
                                      0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55};
    assert_int_equal(wm_payload_keys_digest(NULL, 0, da), WM_OK);
    assert_memory_equal(da, empty, 32);
}

static void test_affinity_check_against_revision(void **state)
{
    (void)state;
    const uint64_t bytes[] = {100, 200, 300};
    wm_revision r;
    wm_affinity a = {NULL, 0, 0}, c = {NULL, 0, 0};
    char msg[200];
    wmt_ready_revision(&r, &a, "m", 1, bytes, 3);
    assert_int_equal(wm_affinity_check(&a, &r, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_affinity_copy(&a, &c), WM_OK);
    assert_int_equal(wm_affinity_check(&c, &r, msg, sizeof(msg)), WM_OK);

    c.units[1].logical_bytes = 201; /* bytes no longer add up */
    assert_int_equal(wm_affinity_check(&c, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "bytes"));
    c.units[1].logical_bytes = 200;

    free(c.units[2].members[0]); /* a member of another revision */
    c.units[2].members[0] = strdup("weights/x/y/z/w/1/payload/2");
    assert_int_equal(wm_affinity_check(&c, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "not a payload key"));

    free(c.units[2].members[0]); /* a member twice */
    c.units[2].members[0] = strdup(c.units[0].members[0]);
    assert_int_equal(wm_affinity_check(&c, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "two affinity units"));
    wm_affinity_clear(&c);

    r.affinity_sha256[0] ^= 1; /* digest mismatch */
    assert_int_equal(wm_affinity_check(&a, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "digest"));
    r.affinity_sha256[0] ^= 1;
    r.affinity_count = 2;
    assert_int_equal(wm_affinity_check(&a, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    wm_affinity_clear(&a);
    wm_affinity_clear(&a); /* idempotent */
}

/* A member is a payload key of the revision exactly when wm_key_parse
 * reads it as one with the revision's identity; the check compares the
 * spelling with the canonical group key instead of parsing each member.
 * Near misses of every part -- the prefix, a component spelled another
 * way, the generation, the kind, the payload number -- are judged as the
 * parse judges them, by the plain and the keyed check alike. */
static void test_affinity_members_judged_as_the_key_parse_does(void **state)
{
    (void)state;
    const uint64_t bytes[] = {100};
    wm_revision r;
    wm_affinity a = {NULL, 0, 0};
    char msg[200], g[WM_KEY_MAX + 1], m[WM_KEY_MAX + 64];
    wmt_ready_revision(&r, &a, "m x/y", 7, bytes, 1); /* "m%20x%2Fy" in its keys */
    assert_true(wm_group_key(&r.id, g, sizeof(g)) > 0);
    assert_non_null(strstr(g, "/m%20x%2Fy/"));
    const char *tails[] = {
        "/payload/0", "/payload/9", "/payload/18446744073709551615", "/payload/18446744073709551616",
        "/payload/01", "/payload/", "/payload/1/2", "/payload/-1", "/payload/1x", "/payload",
        "/manifest", "", "/payload/0/", "/Payload/0", "/payload/ 1", "/payload/00",
        "/payload/99999999999999999999"};
    const char *heads[] = {NULL, "weights/tenant-a/llm/m%20x%2fy/main/7",
                           "weights/tenant-a/llm/m+x%2Fy/main/7", "weights/tenant-a/llm/m%20x%2Fy/main/07",
                           "weights/tenant-a/llm/m%20x%2Fy/main/8", "Weights/tenant-a/llm/m%20x%2Fy/main/7",
                           "weights/tenant-a/llm/m%20x%2Fy/%6Dain/7", "weights/tenant-a/llm/m%20x/y/main/7"};
    char *was = a.units[0].members[0];
    size_t accepted = 0;
    for (size_t h = 0; h < sizeof(heads) / sizeof(heads[0]); h++) {
        for (size_t t = 0; t < sizeof(tails) / sizeof(tails[0]); t++) {
            snprintf(m, sizeof(m), "%s%s", heads[h] != NULL ? heads[h] : g, tails[t]);
            wm_identity_buf mid;
            wm_key_kind kind;
            int want = wm_key_parse(m, &mid, &kind, NULL) == WM_OK && kind == WM_KEY_PAYLOAD &&
                       wm_identity_cmp(&mid.id, &r.id) == 0;
            a.units[0].members[0] = m;
            int rc1 = wm_affinity_check(&a, &r, msg, sizeof(msg));
            int refused1 = rc1 != WM_OK && strstr(msg, "not a payload key") != NULL;
            int rc2 = wm_affinity_check_keyed(&a, &r, r.group_key, msg, sizeof(msg));
            int refused2 = rc2 != WM_OK && strstr(msg, "not a payload key") != NULL;
            if (refused1 != !want || refused2 != !want)
                fail_msg("member %s: the parse says %d, the checks %d and %d", m, want, !refused1,
                         !refused2);
            accepted += (size_t)want;
        }
    }
    assert_int_equal(accepted, 3); /* 0, 9 and UINT64_MAX under the canonical group key */
    a.units[0].members[0] = was;
    assert_int_equal(wm_affinity_check(&a, &r, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_affinity_check_keyed(&a, &r, r.group_key, msg, sizeof(msg)), WM_OK);
    wm_affinity_clear(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_accepts_a_plain_identity),
        cmocka_unit_test(test_identity_refuses_empty_components),
        cmocka_unit_test(test_identity_refuses_too_long_components),
        cmocka_unit_test(test_identity_refuses_bad_utf8_and_nul),
        cmocka_unit_test(test_utf8_judged_alike_at_every_offset),
        cmocka_unit_test(test_key_length_counts_every_byte_as_encoded),
        cmocka_unit_test(test_identity_order_and_lineage),
        cmocka_unit_test(test_pct_encoding_passes_unreserved_only),
        cmocka_unit_test(test_pct_decoding_is_strict),
        cmocka_unit_test(test_canonical_keys),
        cmocka_unit_test(test_key_round_trips_with_special_characters),
        cmocka_unit_test(test_key_parse_refuses_non_canonical_keys),
        cmocka_unit_test(test_enum_names_round_trip),
        cmocka_unit_test(test_error_names),
        cmocka_unit_test(test_policy_default_is_mixed_half_auto),
        cmocka_unit_test(test_policy_refuses_bad_ratios_and_states),
        cmocka_unit_test(test_policy_from_config_names),
        cmocka_unit_test(test_policy_precedence_call_client_cluster),
        cmocka_unit_test(test_payload_digest_ignores_order),
        cmocka_unit_test(test_affinity_check_against_revision),
        cmocka_unit_test(test_affinity_members_judged_as_the_key_parse_does),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
