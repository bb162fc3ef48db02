/* test_ha_rows.c -- unit tests of ha_rows_with (host_shim/ha/ha_election.c):
 * the rows a status shows are the registry as last read with the answering
 * master's own row in its place (sorted by id) when the registry does not
 * hold it -- before its first read, or when etcd went away first. A row the
 * registry has is never doubled, and when the rows are full the last gives
 * way to the master's own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ha_election.h"

static ha_member row(const char *id, const char *role)
{
    ha_member m;
    memset(&m, 0, sizeof(m));
    snprintf(m.id, sizeof(m.id), "%s", id);
    snprintf(m.role, sizeof(m.role), "%s", role);
    return m;
}

/* The ids of rows[0, n), comma-separated, into out. */
static const char *ids(const ha_member *rows, size_t n, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (i > 0) strncat(out, ",", cap - strlen(out) - 1);
        strncat(out, rows[i].id, cap - strlen(out) - 1);
    }
    return out;
}

static void test_own_row_is_added_in_its_place(void **state)
{
    (void)state;
    char got[128];
    ha_member self = row("m1", "standby"), rows[4];
    /* no registry read yet: the master's own row alone */
    assert_int_equal(ha_rows_with(rows, 0, 4, &self), 1);
    assert_string_equal(rows[0].role, "standby");
    /* in the middle, first, last */
    rows[0] = row("m0", "leader");
    rows[1] = row("m2", "standby");
    assert_int_equal(ha_rows_with(rows, 2, 4, &self), 3);
    assert_string_equal(ids(rows, 3, got, sizeof(got)), "m0,m1,m2");
    ha_member first = row("a", "standby");
    rows[0] = row("m0", "leader");
    assert_int_equal(ha_rows_with(rows, 1, 4, &first), 2);
    assert_string_equal(ids(rows, 2, got, sizeof(got)), "a,m0");
    ha_member last = row("z", "standby");
    assert_int_equal(ha_rows_with(rows, 2, 4, &last), 3);
    assert_string_equal(ids(rows, 3, got, sizeof(got)), "a,m0,z");
}

static void test_a_registered_row_is_not_doubled(void **state)
{
    (void)state;
    char got[128];
    ha_member self = row("m1", "candidate"), rows[3];
    rows[0] = row("m0", "leader");
    rows[1] = row("m1", "standby");
    rows[2] = row("m2", "standby");
    assert_int_equal(ha_rows_with(rows, 3, 3, &self), 3);
    assert_string_equal(ids(rows, 3, got, sizeof(got)), "m0,m1,m2");
    assert_string_equal(rows[1].role, "standby"); /* the registry's row stays */
}

static void test_full_rows_give_the_last_one_up(void **state)
{
    (void)state;
    char got[128];
    ha_member rows[3];
    ha_member mid = row("m1", "standby"), end = row("m9", "standby");
    rows[0] = row("m0", "leader");
    rows[1] = row("m2", "standby");
    rows[2] = row("m3", "standby");
    assert_int_equal(ha_rows_with(rows, 3, 3, &mid), 3);
    assert_string_equal(ids(rows, 3, got, sizeof(got)), "m0,m1,m2");
    /* its own place is past the end: it takes the last row's */
    assert_int_equal(ha_rows_with(rows, 3, 3, &end), 3);
    assert_string_equal(ids(rows, 3, got, sizeof(got)), "m0,m1,m9");
    /* more registered than fit (n > cap): counted as full */
    assert_int_equal(ha_rows_with(rows, 7, 3, &mid), 3);
    assert_int_equal(ha_rows_with(rows, 0, 0, &mid), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_row_is_added_in_its_place),
        cmocka_unit_test(test_a_registered_row_is_not_doubled),
        cmocka_unit_test(test_full_rows_give_the_last_one_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
