/* test_signals.c -- what signals do to a real store_master.
 *
 * SIGHUP, which operators and terminal hang-ups send, must never take the
 * master down: it reloads the plugins in place (test_plugin_reload has the
 * details), and three in a row leave it serving.
 * SIGTERM shuts it down cleanly (exit 0). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "harness.h"

static void test_sighup_never_kills_the_master(void **state)
{
    (void)state;
    hx_master m;
    assert_int_equal(hx_init(&m, "signals", NULL), 0);
    assert_int_equal(hx_start(&m, 20000), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(kill(m.pid, SIGHUP), 0);
    int logged = 0;
    for (int waited = 0; waited < 10000 && !logged; waited += 20) {
        logged = hx_log_contains(&m, "SIGHUP: every plugin looked at; serving on");
        if (!logged) nanosleep(&(struct timespec){0, 20000000L}, NULL);
    }
    assert_true(logged);
    assert_true(hx_alive(&m));
    kvc *c = hx_client(&m);
    assert_non_null(c);
    assert_int_equal(kvc_put_bytes(c, "kv/after-hup", "x", 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    kvc_close(c);
    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sighup_never_kills_the_master),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
