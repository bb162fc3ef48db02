/* test_wc_weight_identity.c -- the command-line form of a revision identity.
 *
 * weightctl names a revision NAMESPACE/RESOURCE/REVISION@GENERATION, with
 * components percent-encoded where they hold '/', '@' or '%'
 * (weight_identity_parse / weight_identity_format of weightclient.h). These
 * tests pin the accepted forms, the refusals, and that formatting then
 * parsing gives back the identity, for awkward names too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "weightclient.h"

static void test_plain_and_encoded_forms_parse(void **state)
{
    (void)state;
    weight_identity id;
    int has = -1;
    assert_int_equal(weight_identity_parse("llm/tiny/v1@3", "acme", &id, &has), 0);
    assert_int_equal(has, 1);
    assert_string_equal(id.tenant_id, "acme");
    assert_string_equal(id.namespace_id, "llm");
    assert_string_equal(id.resource_id, "tiny");
    assert_string_equal(id.revision, "v1");
    assert_int_equal(id.generation, 3);

    assert_int_equal(weight_identity_parse("org%2Fteam/model%40x/r%25a", NULL, &id, &has), 0);
    assert_int_equal(has, 0);
    assert_string_equal(id.tenant_id, "");
    assert_string_equal(id.namespace_id, "org/team");
    assert_string_equal(id.resource_id, "model@x");
    assert_string_equal(id.revision, "r%a");
    assert_int_equal(id.generation, 0);

    /* Lower-case hex and UTF-8 pass. */
    assert_int_equal(weight_identity_parse("a%2fb/\xc3\xa9/v@18446744073709551614", NULL, &id, NULL), 0);
    assert_string_equal(id.namespace_id, "a/b");
    assert_string_equal(id.resource_id, "\xc3\xa9");
    assert_true(id.generation == 18446744073709551614ull);
}

static void test_malformed_forms_are_refused(void **state)
{
    (void)state;
    weight_identity id;
    const char *bad[] = {
        "", "llm", "llm/tiny", "llm/tiny/", "/tiny/v1", "llm//v1", "llm/tiny/v1/x",
        "llm/tiny/v1@", "llm/tiny/v1@x", "llm/tiny/v1@1@2", "llm/tiny/v1@-1", "llm/tiny/v1@1x",
        "llm/tiny/v1@99999999999999999999", "llm/%2/v1", "llm/%zz/v1", "llm/%00/v1", "llm/tiny/v1%",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = weight_identity_parse(bad[i], NULL, &id, NULL);
        if (rc != WEIGHT_EINVALID_ARGUMENT) fail_msg("'%s' was accepted", bad[i]);
    }
    char longc[400];
    memset(longc, 'a', sizeof longc);
    longc[sizeof longc - 1] = '\0';
    char text[500];
    snprintf(text, sizeof text, "n/r/%s@1", longc);
    assert_int_equal(weight_identity_parse(text, NULL, &id, NULL), WEIGHT_EINVALID_ARGUMENT);
    assert_int_equal(weight_identity_parse(NULL, NULL, &id, NULL), WEIGHT_EINVALID_ARGUMENT);
}

static void test_format_then_parse_round_trips(void **state)
{
    (void)state;
    const char *names[] = {"plain", "with/slash", "at@sign", "100%", "sp ace", "\xe2\x82\xac/@%",
                           "%2F"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        weight_identity a, b;
        char text[2048];
        assert_int_equal(weight_identity_set(&a, "t", names[i], names[(i + 1) % 7], names[(i + 2) % 7],
                                             i + 1), 0);
        assert_true(weight_identity_format(&a, text, sizeof text) > 0);
        assert_int_equal(weight_identity_parse(text, "t", &b, NULL), 0);
        assert_memory_equal(&a, &b, sizeof a);
    }
    weight_identity a;
    char small[8];
    assert_int_equal(weight_identity_set(&a, NULL, "namespace", "r", "v", 1), 0);
    assert_int_equal(weight_identity_format(&a, small, sizeof small), WEIGHT_EINVALID_ARGUMENT);
}

static void test_identity_set_refuses_empty_and_long_components(void **state)
{
    (void)state;
    weight_identity id;
    char longc[WEIGHT_ID_MAX + 2];
    memset(longc, 'x', sizeof longc);
    longc[sizeof longc - 1] = '\0';
    assert_int_equal(weight_identity_set(&id, NULL, "", "r", "v", 1), WEIGHT_EINVALID_ARGUMENT);
    assert_int_equal(weight_identity_set(&id, NULL, "n", NULL, "v", 1), WEIGHT_EINVALID_ARGUMENT);
    assert_int_equal(weight_identity_set(&id, NULL, "n", "r", longc, 1), WEIGHT_EINVALID_ARGUMENT);
    assert_int_equal(weight_identity_set(&id, longc, "n", "r", "v", 1), WEIGHT_EINVALID_ARGUMENT);
    assert_string_equal(weight_error_name(WEIGHT_ESTALE_GENERATION), "STALE_GENERATION");
    assert_string_equal(weight_error_name(WEIGHT_EDIGEST_MISMATCH), "DIGEST_MISMATCH");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_and_encoded_forms_parse),
        cmocka_unit_test(test_malformed_forms_are_refused),
        cmocka_unit_test(test_format_then_parse_round_trips),
        cmocka_unit_test(test_identity_set_refuses_empty_and_long_components),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
