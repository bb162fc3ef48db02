/* test_master_list.c -- the master list of clients and nodes (client/master_list.h).
 *
 * Pins: a list of endpoints of every form parses in order, a single
 * endpoint is a list of one; every bad list is refused with a message that
 * names the bad item (empty items, too many, bad or missing port, no host,
 * bad Unix path, repeats); a standby's named leader becomes the endpoint in
 * use (by index when it is in the list), a malformed one is ignored; and
 * one round of moves visits every endpoint once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "master_list.h"
#include "store_plugin.h"

/* spec is refused, and the message holds needle. */
static void refused(const char *spec, const char *needle)
{
    master_list ml;
    char err[512] = "";
    assert_int_equal(master_list_parse(spec, &ml, err, sizeof(err)), SMP_EINVAL);
    if (strstr(err, needle) == NULL) fail_msg("'%s': message '%s' lacks '%s'", spec, err, needle);
    assert_int_equal(ml.n, 0);
}

static void test_lists_of_every_form_parse_in_order(void **state)
{
    (void)state;
    master_list ml;
    char err[256] = "";
    assert_int_equal(master_list_parse("10.0.0.1:7600, m2.example:7601 ,unix:/run/m3.sock,"
                                       "/tmp/m4.sock,[::1]:7602",
                                       &ml, err, sizeof(err)),
                     SMP_OK);
    assert_int_equal(ml.n, 5);
    assert_string_equal(ml.ep[0], "10.0.0.1:7600");
    assert_string_equal(ml.ep[1], "m2.example:7601");
    assert_string_equal(ml.ep[2], "unix:/run/m3.sock");
    assert_string_equal(ml.ep[3], "/tmp/m4.sock");
    assert_string_equal(ml.ep[4], "[::1]:7602");
    assert_string_equal(master_list_current(&ml), "10.0.0.1:7600");
    assert_int_equal(master_list_round(&ml), 5);

    assert_int_equal(master_list_parse("127.0.0.1:7600", &ml, err, sizeof(err)), SMP_OK);
    assert_int_equal(ml.n, 1);
    assert_string_equal(master_list_current(&ml), "127.0.0.1:7600");

    /* exactly ML_MAX_ENDPOINTS is fine */
    char spec[ML_MAX_ENDPOINTS * 24] = "";
    for (int i = 0; i < ML_MAX_ENDPOINTS; i++) {
        char one[24];
        snprintf(one, sizeof(one), "%sh%d:%d", i ? "," : "", i, 7000 + i);
        strcat(spec, one);
    }
    assert_int_equal(master_list_parse(spec, &ml, err, sizeof(err)), SMP_OK);
    assert_int_equal(ml.n, ML_MAX_ENDPOINTS);
}

/* A Unix endpoint's socket path, in both spellings; host:port has none. */
static void test_unix_path_of_an_endpoint(void **state)
{
    (void)state;
    assert_string_equal(master_list_unix_path("unix:/run/wm.sock"), "/run/wm.sock");
    assert_string_equal(master_list_unix_path("/run/wm.sock"), "/run/wm.sock");
    assert_null(master_list_unix_path("127.0.0.1:7600"));
    assert_null(master_list_unix_path("[::1]:7600"));
    assert_null(master_list_unix_path("unixhost:7600"));
}

static void test_bad_lists_name_the_bad_item(void **state)
{
    (void)state;
    refused("", "no master endpoint");
    refused("a:1,,b:2", "item 2 is empty");
    refused("a:1,b:2,", "item 3 is empty");
    refused(",a:1", "item 1 is empty");
    refused("a:1, ,b:2", "item 2 is empty");
    refused("a:1,b:0", "item 2: endpoint 'b:0': port '0' is not a number in 1..65535");
    refused("a:1,b:65536", "port '65536'");
    refused("a:1,b:http", "port 'http'");
    refused("a:1,b:", "item 2: endpoint 'b:'");
    refused("a:1,:7600", "item 2: endpoint ':7600' has no host");
    refused("nohost", "endpoint 'nohost' is not host:port, unix:/path or /path");
    refused("a:1,nohost", "item 2: endpoint 'nohost' is not host:port, unix:/path or /path");
    refused("::1:7600", "[addr]:port");
    refused("[::1:7600", "[addr]:port");
    refused("a:1,unix:relative.sock", "item 2: endpoint 'unix:relative.sock': a Unix socket path");
    refused("a:1,b:2,a:1", "item 3 ('a:1') repeats item 1");
    refused("a:1,b c:2", "item 2: endpoint 'b c:2' holds a blank");

    char spec[(ML_MAX_ENDPOINTS + 1) * 24] = "";
    for (int i = 0; i <= ML_MAX_ENDPOINTS; i++) {
        char one[24];
        snprintf(one, sizeof(one), "%sh%d:%d", i ? "," : "", i, 7000 + i);
        strcat(spec, one);
    }
    refused(spec, "more than 16 endpoints");

    char longpath[200];
    memset(longpath, 'p', sizeof(longpath));
    longpath[0] = '/';
    longpath[sizeof(longpath) - 1] = '\0';
    refused(longpath, "shorter than");

    char longitem[ML_ENDPOINT_MAX + 16];
    memset(longitem, 'h', sizeof(longitem));
    memcpy(longitem + sizeof(longitem) - 6, ":7600", 6);
    refused(longitem, "is longer than 255 bytes");
}

static void test_named_leader_becomes_current(void **state)
{
    (void)state;
    master_list ml;
    assert_int_equal(master_list_parse("a:1,b:2,c:3", &ml, NULL, 0), SMP_OK);

    /* one of the list: taken by its index, no extra endpoint */
    assert_int_equal(master_list_set_leader(&ml, "c:3", 3), 1);
    assert_string_equal(master_list_current(&ml), "c:3");
    assert_int_equal(master_list_round(&ml), 3);

    /* another one (an advertised address): tried first, then the list */
    assert_int_equal(master_list_set_leader(&ml, "10.1.1.1:7600xx", 12), 1);
    assert_string_equal(master_list_current(&ml), "10.1.1.1:760");
    assert_int_equal(master_list_round(&ml), 4);
    master_list_next(&ml);
    assert_string_equal(master_list_current(&ml), "a:1");

    /* a newer name replaces it */
    assert_int_equal(master_list_set_leader(&ml, "/run/m.sock", 11), 1);
    assert_string_equal(master_list_current(&ml), "/run/m.sock");
    assert_int_equal(master_list_round(&ml), 4);

    /* empty, malformed or hostile names are no name: the hint goes */
    static const struct { const char *s; size_t n; } bad[] = {
        {"", 0}, {"nohost", 6}, {"a:1\0b", 5}, {"x:0", 3}, {"a b:1", 5}, {"\x01:1", 3},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(master_list_set_leader(&ml, "/run/m.sock", 11), 1);
        assert_int_equal(master_list_set_leader(&ml, bad[i].s, bad[i].n), 0);
        assert_string_equal(master_list_current(&ml), "a:1");
        assert_int_equal(master_list_round(&ml), 3);
    }
    char huge[ML_ENDPOINT_MAX + 10];
    memset(huge, 'h', sizeof(huge));
    assert_int_equal(master_list_set_leader(&ml, huge, sizeof(huge)), 0);
    assert_int_equal(master_list_round(&ml), 3);
}

/* One round of moves from anywhere visits every endpoint once. */
static void test_a_round_visits_every_endpoint_once(void **state)
{
    (void)state;
    master_list ml;
    assert_int_equal(master_list_parse("a:1,b:2,c:3", &ml, NULL, 0), SMP_OK);
    for (int with_leader = 0; with_leader < 2; with_leader++) {
        for (size_t start = 0; start < 3; start++) {
            int seen[4] = {0};
            assert_int_equal(master_list_parse("a:1,b:2,c:3", &ml, NULL, 0), SMP_OK);
            if (with_leader) master_list_set_leader(&ml, "l:9", 3);
            for (size_t k = 0; k < start; k++) master_list_next(&ml);
            size_t round = master_list_round(&ml);
            assert_int_equal(round, 3 + (size_t)with_leader);
            for (size_t k = 0; k < round; k++) {
                const char *ep = master_list_current(&ml);
                seen[ep[0] == 'l' ? 3 : ep[0] - 'a']++;
                master_list_next(&ml);
            }
            for (int k = 0; k < 3 + with_leader; k++) assert_int_equal(seen[k], 1);
        }
    }
    /* a list of one stays where it is */
    assert_int_equal(master_list_parse("/tmp/only.sock", &ml, NULL, 0), SMP_OK);
    master_list_next(&ml);
    assert_string_equal(master_list_current(&ml), "/tmp/only.sock");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lists_of_every_form_parse_in_order),
        cmocka_unit_test(test_unix_path_of_an_endpoint),
        cmocka_unit_test(test_bad_lists_name_the_bad_item),
        cmocka_unit_test(test_named_leader_becomes_current),
        cmocka_unit_test(test_a_round_visits_every_endpoint_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
