/* test_ha_status.c -- what `weightctl status` and /health say of an HA
 * cluster (real etcd, three masters) when the picture is not a healthy
 * one: etcd gone, or the leader hung.
 *
 * With etcd SIGKILLed, a standby's /health is 503 naming etcd, and status
 * through it tells one story: the OpLog "unreachable" (--json
 * oplog.state, with its cause; text "oplog     UNREACHABLE"), no master's
 * row ready (the registry is an old picture: the others' rows say they are
 * unknown, its own that it cannot reach etcd), exit 1. With the leader
 * SIGSTOPped (a lease long enough that nobody replaces it meanwhile),
 * status through a standby says the leader did not answer: its row is not
 * ready and says so, and the nodes line does not send the reader to it.
 * HA_TEST=pattern runs only the matching tests. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ha_cluster_fixture.h"
#include "harness.h"
#include "weight_model.h"

#define WAIT_MS 20000
#define OUT_CAP 16384

typedef struct fx {
    hc_cluster hc;
    char out[OUT_CAP];
} fx;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* How many times needle occurs in text. */
static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle)) n++;
    return n;
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    if (f == NULL) return -1;
    *state = f;
    if (hc_init(&f->hc, "ha-status", 1) < 0) {
        free(f);
        *state = NULL;
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    for (int i = 0; i < HC_MASTERS; i++)
        if (f->hc.m[i].pid > 0) kill(f->hc.m[i].pid, SIGCONT);
    hc_cleanup(&f->hc);
    free(f);
    return 0;
}

static int start_cluster(fx *f)
{
    for (int i = 0; i < HC_MASTERS; i++) {
        assert_int_equal(hc_configure(&f->hc, i, ""), 0);
        if (hx_start(&f->hc.m[i], WAIT_MS) < 0) fail_msg("master %d did not start", i);
    }
    int leader = hc_wait_leader(&f->hc, -1, WAIT_MS);
    if (leader < 0) fail_msg("no leader");
    for (int i = 0; i < HC_MASTERS; i++)
        if (i != leader && hc_wait_role(&f->hc, i, "standby", WAIT_MS) < 0)
            fail_msg("master %d is not a standby", i);
    return leader;
}

/* weightctl ARGS through master i alone. */
static int ctl(fx *f, int i, const char *args)
{
    return wx_weightctl(&f->hc.m[i], f->out, sizeof(f->out), args);
}

/* Wait until standby s has read the registry with every master in it (a
 * role is known from the campaign, before the first registry read). */
static void wait_registry_read(fx *f, int s)
{
    for (long long end = hx_now_ms() + WAIT_MS;; sleep_ms(100)) {
        assert_int_equal(ctl(f, s, "--json status"), 0);
        assert_non_null(strstr(f->out, "\"oplog\":{\"state\":\"ok\"}"));
        if (count(f->out, "{\"id\":\"m") == HC_MASTERS) return;
        if (hx_now_ms() > end) fail_msg("standby %d never listed %d masters: %s", s, HC_MASTERS, f->out);
    }
}

static void test_ha_status_during_an_etcd_outage_is_one_story(void **state)
{
    fx *f = *state;
    int leader = start_cluster(f);
    int s = (leader + 1) % HC_MASTERS;
    /* its picture during the outage is the registry as last read */
    wait_registry_read(f, s);

    assert_int_equal(etcd_fixture_kill(&f->hc.etcd, 0), 0);
    char *body = NULL;
    int code = 0;
    for (long long end = hx_now_ms() + WAIT_MS;; sleep_ms(100)) {
        free(body);
        body = NULL;
        code = hx_http_get(&f->hc.m[s], "/health", &body);
        if (code == 503 && body != NULL && strstr(body, "etcd unreachable: etcd has not answered"))
            break;
        if (hx_now_ms() > end) fail_msg("/health of standby %d: %d %s", s, code, body ? body : "");
    }
    free(body);

    if (ctl(f, s, "--json status") != 1 ||
        strstr(f->out, "\"oplog\":{\"state\":\"unreachable\",\"cause\":\"etcd has not answered "
                       "this master") == NULL ||
        strstr(f->out, "\"ready\":true") != NULL)
        fail_msg("status --json during the outage: %s", f->out);
    if (ctl(f, s, "status") != 1 ||
        strstr(f->out, "oplog     UNREACHABLE (etcd has not answered") == NULL ||
        strstr(f->out, "  yes") != NULL || strstr(f->out, "cannot reach etcd") == NULL ||
        count(f->out, "unknown: etcd unreachable from the master answering") != HC_MASTERS - 1)
        fail_msg("status during the outage: %s", f->out);
}

static void test_ha_status_says_the_hung_leader_did_not_answer(void **state)
{
    fx *f = *state;
    f->hc.lease_ttl_s = 30; /* nobody replaces the paused leader during the test */
    int leader = start_cluster(f);
    int s = (leader + 1) % HC_MASTERS;
    wait_registry_read(f, s); /* else its rows may lack the leader's (seen in CI) */
    hx_master view;
    assert_int_equal(hc_list_view(&f->hc, &view), 0);
    /* the standby first in the list: it answers, and names the leader */
    snprintf(view.socket, sizeof(view.socket), "%s,%s", f->hc.m[s].socket,
             f->hc.m[leader].socket);
    assert_int_equal(kill(f->hc.m[leader].pid, SIGSTOP), 0);
    int rc = wx_weightctl(&view, f->out, sizeof(f->out), "status");
    kill(f->hc.m[leader].pid, SIGCONT);
    char row[64];
    snprintf(row, sizeof(row), "  m%d ", leader);
    const char *r = strstr(f->out, row);
    if (rc != 0 || r == NULL ||
        strstr(f->out, "nodes     - (unknown: they register with the leader, and it did not "
                       "answer)") == NULL ||
        strstr(r, "no: did not answer status within 3 s") == NULL ||
        strstr(f->out, "this is a standby's view: the leader it names") == NULL)
        fail_msg("status with the leader paused (exit %d): %s", rc, f->out);
    const char *eol = strchr(r, '\n');
    if (eol != NULL && memmem(r, (size_t)(eol - r), " yes", 4) != NULL)
        fail_msg("the paused leader's row reads as ready: %s", f->out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ha_status_during_an_etcd_outage_is_one_story, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ha_status_says_the_hung_leader_did_not_answer, setup,
                                        teardown),
    };
    if (getenv("HA_TEST") != NULL) cmocka_set_test_filter(getenv("HA_TEST"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
