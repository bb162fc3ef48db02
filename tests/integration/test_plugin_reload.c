/* test_plugin_reload.c -- reloading, disabling and enabling weight_mgmt.so in
 * a running store_master (issue 16, in-process reload).
 *
 * Real processes throughout: the master with the real plugin, libweightclient
 * for the reads, and build/bin/weightctl for every plugin command (its exit
 * status and output are what an operator sees). Each test publishes a small
 * revision first and compares every read with the bytes it wrote.
 *
 *  - reload under load: client threads run weight_get of a READY revision
 *    in a loop while `weightctl plugin reload weight_mgmt` runs five times:
 *    no read fails, every read is byte-identical, each reload is reported
 *    and counted;
 *  - a reload to a build that refuses the handoff (the
 *    weight_mgmt_refuse_handoff.so variant, same sources) rolls back: the
 *    reason is in weightctl's output and the master's log, the old version
 *    serves on (reads, and a new revision put after it);
 *  - an ABI or negotiation mismatch (bad_major.so, newer_minor.so, another
 *    plugin's library, a missing file) is refused with the field named,
 *    nothing changed;
 *  - SIGHUP reloads every plugin from its configured path and the master
 *    serves on;
 *  - in an HA cluster (real etcd, three masters) a standby reloads its own
 *    plugin in place (the first step of a rolling upgrade) and stays a
 *    ready standby; the leader is untouched;
 *  - disable: weight RPCs refused with "plugin weight_mgmt is disabled",
 *    plain kv put/get work, the revision's objects cannot be removed (one
 *    key or by prefix); enable:
 *    the revision READY and byte-identical. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ha_cluster_fixture.h"
#include "harness.h"
#include "host_rpc.pb-c.h"
#include "rpc_client.h"
#include "weightclient.h"

#define N_TENSORS 4
#define ROWS 64
#define COLS 64
#define TENSOR_BYTES (ROWS * COLS * 4)
#define WEIGHTCTL BUILD_DIR "/bin/weightctl"
#define TESTPLUGINS BUILD_DIR "/lib/testplugins"

static uint8_t model[N_TENSORS][TENSOR_BYTES];

static void fill_model(void)
{
    for (int t = 0; t < N_TENSORS; t++)
        for (int i = 0; i < TENSOR_BYTES; i++) model[t][i] = (uint8_t)(i * 7 + t * 31 + (i >> 8));
}

static weight_store *open_store(const hx_master *m)
{
    weight_store *s = NULL;
    char err[512];
    if (weight_store_open(m->socket, "reload", NULL, &s, err, sizeof(err)) != 0) {
        fprintf(stderr, "weight_store_open: %s\n", err);
        return NULL;
    }
    return s;
}

static void set_id(weight_identity *id, const char *rev)
{
    weight_identity_set(id, NULL, "llm", "tiny", rev, 1);
}

/* Publish revision `rev` of the model; the status. */
static int publish(weight_store *s, const char *rev)
{
    weight_identity id;
    weight_writer *w = NULL;
    uint64_t shape[2] = {ROWS, COLS};
    char name[32];
    set_id(&id, rev);
    int rc = weight_put_begin(s, &id, NULL, &w);
    for (int t = 0; rc == 0 && t < N_TENSORS; t++) {
        snprintf(name, sizeof(name), "t%d", t);
        rc = weight_writer_add_tensor(w, name, "F32", 2, shape, model[t]);
    }
    if (rc != 0) {
        if (w != NULL) weight_writer_abort(w);
        return rc;
    }
    return weight_writer_commit(w, NULL);
}

/* weight_get of the whole revision into buf (N_TENSORS x TENSOR_BYTES);
 * the status. */
static int read_all(weight_store *s, const char *rev, uint8_t (*buf)[TENSOR_BYTES])
{
    weight_identity id;
    weight_binding b[N_TENSORS];
    static const char *names[N_TENSORS] = {"t0", "t1", "t2", "t3"};
    set_id(&id, rev);
    for (int t = 0; t < N_TENSORS; t++) b[t] = (weight_binding){names[t], buf[t], TENSOR_BYTES};
    weight_bindings bd = {b, N_TENSORS, NULL, NULL};
    return weight_get(s, &id, NULL, &bd, NULL);
}

static int same_bytes(uint8_t (*buf)[TENSOR_BYTES])
{
    return memcmp(buf, model, sizeof(model)) == 0;
}

/* Run weightctl --master SOCKET args...; its exit status, and its stdout
 * and stderr together in out. */
static int ctl(const hx_master *m, char *out, size_t cap, ...)
{
    const char *argv[16];
    int n = 0, fds[2];
    va_list ap;
    argv[n++] = WEIGHTCTL;
    argv[n++] = "--master";
    argv[n++] = m->socket;
    va_start(ap, cap);
    for (const char *a; n < 15 && (a = va_arg(ap, const char *)) != NULL;) argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    if (pipe(fds) < 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    size_t used = 0;
    ssize_t r;
    while (used + 1 < cap && (r = read(fds[0], out + used, cap - 1 - used)) > 0) used += (size_t)r;
    out[used] = '\0';
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void sleep_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

/* What the running test started, for teardown to stop and remove even
 * when an assertion failed half-way. */
static hx_master *cur_master;
static weight_store **cur_store;
static hc_cluster *cur_cluster;

static int teardown(void **state)
{
    (void)state;
    if (cur_store != NULL && *cur_store != NULL) weight_store_close(*cur_store);
    if (cur_store != NULL) *cur_store = NULL;
    if (cur_master != NULL) hx_cleanup(cur_master);
    if (cur_cluster != NULL) {
        hc_cleanup(cur_cluster);
        free(cur_cluster);
    }
    cur_master = NULL;
    cur_store = NULL;
    cur_cluster = NULL;
    return 0;
}

/* A master with the weight plugin and a revision "v1" published. */
static void start(hx_master *m, const char *name, weight_store **s)
{
    memset(m, 0, sizeof(*m));
    *s = NULL;
    cur_master = m;
    cur_store = s;
    fill_model();
    /* HOT and MANUAL: the revision stays where it is published, so any
     * failed read would be the reload's (a MIXED convergence releasing
     * memory replicas makes a concurrent replica lookup answer BUSY). */
    assert_int_equal(hx_init(m, name,
                             "snapshot:\n  every_records: 0\n"
                             "cluster:\n  default_weight_preferred_residency: hot\n"
                             "  default_weight_migration_mode: manual\n"),
                     0);
    assert_int_equal(hx_start(m, 20000), 0);
    *s = open_store(m);
    assert_non_null(*s);
    int rc = publish(*s, "v1");
    if (rc != 0) fprintf(stderr, "publish: %s: %s\n", weight_error_name(rc), weight_store_last_error(*s));
    assert_int_equal(rc, 0);
}

/* Close the store and stop the master: a clean exit (0; a sanitizer build
 * reports leaks or errors in the status). */
static void finish(hx_master *m, weight_store **s)
{
    weight_store_close(*s);
    *s = NULL;
    assert_int_equal(hx_stop(m), 0);
}

static void assert_serving(hx_master *m, weight_store *s, const char *version, const char *reloads)
{
    static uint8_t buf[N_TENSORS][TENSOR_BYTES];
    char out[4096], want[256];
    memset(buf, 0, sizeof(buf));
    assert_int_equal(read_all(s, "v1", buf), 0);
    assert_true(same_bytes(buf));
    assert_int_equal(ctl(m, out, sizeof(out), "plugin", "list", NULL), 0);
    snprintf(want, sizeof(want), "weight_mgmt %s active abi 1.%d reloadable yes reloads %s ", version,
             SMP_ABI_MINOR, reloads);
    if (strstr(out, want) == NULL) fprintf(stderr, "plugin list: %s", out);
    assert_non_null(strstr(out, want));
}

/* -- reload under load ------------------------------------------------------- */

typedef struct reader {
    const hx_master *m;
    volatile int *stop;
    unsigned long reads;
    unsigned long failed;
    unsigned long wrong;
    char last_error[512];
} reader;

static void *reader_main(void *arg)
{
    reader *r = arg;
    uint8_t (*buf)[TENSOR_BYTES] = malloc(sizeof(model));
    weight_store *s = open_store(r->m);
    if (s == NULL || buf == NULL) {
        r->failed++;
        free(buf);
        return NULL;
    }
    while (!*r->stop) {
        memset(buf, 0, sizeof(model));
        int rc = read_all(s, "v1", buf);
        r->reads++;
        if (rc != 0) {
            r->failed++;
            snprintf(r->last_error, sizeof(r->last_error), "%s: %s", weight_error_name(rc),
                     weight_store_last_error(s));
        } else if (!same_bytes(buf)) {
            r->wrong++;
        }
    }
    weight_store_close(s);
    free(buf);
    return NULL;
}

static void test_reload_under_load_never_fails_a_read(void **state)
{
    (void)state;
    static hx_master m; /* static: teardown still finds them after a failed assertion */
    static weight_store *s;
    char out[4096];
    start(&m, "reload-load", &s);

    enum { READERS = 3, RELOADS = 5 };
    static volatile int stop; /* static: outlive a failed assertion with the threads */
    static reader rd[READERS];
    pthread_t th[READERS];
    stop = 0;
    for (int i = 0; i < READERS; i++) {
        rd[i] = (reader){.m = &m, .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, reader_main, &rd[i]), 0);
    }
    sleep_ms(200);
    for (int i = 0; i < RELOADS; i++) {
        int rc = ctl(&m, out, sizeof(out), "plugin", "reload", "weight_mgmt", NULL);
        if (rc != 0) fprintf(stderr, "reload %d: %s", i, out);
        assert_int_equal(rc, 0);
        assert_non_null(strstr(out, "weight_mgmt: reloaded 0.1.0 -> 0.1.0 in "));
        sleep_ms(100);
    }
    stop = 1;
    unsigned long reads = 0;
    for (int i = 0; i < READERS; i++) {
        pthread_join(th[i], NULL);
        if (rd[i].failed) fprintf(stderr, "reader %d: %lu failed: %s\n", i, rd[i].failed, rd[i].last_error);
        assert_int_equal(rd[i].failed, 0);
        assert_int_equal(rd[i].wrong, 0);
        reads += rd[i].reads;
    }
    fprintf(stderr, "%lu reads across %d reloads, none failed\n", reads, RELOADS);
    assert_true(reads > 0);
    assert_true(hx_wait_log(&m, "plugin weight_mgmt: reloaded 0.1.0 -> 0.1.0 from ", 1000));
    assert_serving(&m, s, "0.1.0", "5");
    /* The new instance writes too: a second revision is published. */
    assert_int_equal(publish(s, "v2"), 0);
    finish(&m, &s);
}

/* -- refusals roll back ---------------------------------------------------- */

static void test_reload_to_a_build_refusing_the_handoff_rolls_back(void **state)
{
    (void)state;
    static hx_master m; /* static: teardown still finds them after a failed assertion */
    static weight_store *s;
    char out[4096];
    start(&m, "reload-refuse", &s);
    int rc = ctl(&m, out, sizeof(out), "plugin", "reload", "weight_mgmt", "--path",
                 TESTPLUGINS "/weight_mgmt_refuse_handoff.so", NULL);
    fprintf(stderr, "%s", out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "the new instance refused the state handoff: this build (the "
                                "refuse-handoff test variant) takes no handoff"));
    assert_true(hx_wait_log(&m, "plugin weight_mgmt: reload refused, the serving instance (0.1.0) "
                             "serves on: weight_mgmt_refuse_handoff.so: the new instance refused",
                         2000));
    assert_serving(&m, s, "0.1.0", "0");
    assert_int_equal(publish(s, "v2"), 0); /* the old instance still writes */
    /* And a good reload still goes through afterwards. */
    assert_int_equal(ctl(&m, out, sizeof(out), "plugin", "reload", "weight_mgmt", NULL), 0);
    assert_serving(&m, s, "0.1.0", "1");
    finish(&m, &s);
}

static void refused(hx_master *m, const char *path, const char *needle)
{
    char out[4096];
    int rc = ctl(m, out, sizeof(out), "plugin", "reload", "weight_mgmt", "--path", path, NULL);
    if (rc != 1 || strstr(out, needle) == NULL) fprintf(stderr, "%s: %s", path, out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, needle));
}

static void test_abi_and_negotiation_mismatches_are_refused(void **state)
{
    (void)state;
    static hx_master m; /* static: teardown still finds them after a failed assertion */
    static weight_store *s;
    start(&m, "reload-abi", &s);
    refused(&m, TESTPLUGINS "/bad_major.so", "bad_major.so: ABI major 2 does not match host ABI major 1");
    char newer[96];
    snprintf(newer, sizeof(newer), "newer_minor.so: ABI minor %d is newer than host ABI minor %d",
             SMP_ABI_MINOR + 1, SMP_ABI_MINOR);
    refused(&m, TESTPLUGINS "/newer_minor.so", newer);
    refused(&m, TESTPLUGINS "/good_other.so",
            "good_other.so: plugin name 'good_other' is not 'weight_mgmt'");
    refused(&m, TESTPLUGINS "/no-such-plugin.so", "no-such-plugin.so: cannot load");
    char out[4096];
    assert_int_equal(ctl(&m, out, sizeof(out), "plugin", "reload", "no_such_plugin", NULL), 1);
    assert_non_null(strstr(out, "no plugin named 'no_such_plugin' is loaded (loaded: weight_mgmt)"));
    assert_int_equal(ctl(&m, out, sizeof(out), "plugin", "reload", NULL), 2); /* usage */
    /* a relative path sent as is (weightctl makes its own absolute) would
     * name a file of the master's working directory: refused, nothing loaded */
    {
        char err[256], *msg = NULL;
        rpcc_conn *c = NULL;
        rpcc_options o = {.timeout_ms = 10000};
        int status = 0;
        PluginRequest req = PLUGIN_REQUEST__INIT;
        req.name = (char *)"weight_mgmt";
        req.path = (char *)"build/lib/weight_mgmt.so";
        assert_int_equal(rpcc_connect(m.socket, &o, &c, err, sizeof(err)), 0);
        assert_int_equal(rpcc_call_msg(c, HOST_SERVICE__HOST_SERVICE_ADMIN,
                                       ADMIN_METHOD__ADMIN_PLUGIN_RELOAD, &req.base, NULL, NULL,
                                       &status, NULL, NULL, &msg),
                         0);
        assert_int_equal(status, SMP_EINVAL);
        assert_non_null(msg);
        assert_non_null(strstr(msg, "path 'build/lib/weight_mgmt.so' is relative: the master "
                                    "opens it on its own host, so give it absolute"));
        free(msg);
        rpcc_close(c);
    }
    assert_serving(&m, s, "0.1.0", "0");
    assert_true(hx_alive(&m));
    finish(&m, &s);
}

/* -- SIGHUP ------------------------------------------------------------------ */

static void test_sighup_reloads_every_plugin(void **state)
{
    (void)state;
    static hx_master m; /* static: teardown still finds them after a failed assertion */
    static weight_store *s;
    start(&m, "reload-hup", &s);
    assert_int_equal(kill(m.pid, SIGHUP), 0);
    assert_true(hx_wait_log(&m, "SIGHUP: reloading every plugin from its configured path", 5000));
    assert_true(hx_wait_log(&m, "plugin weight_mgmt: reloaded 0.1.0 -> 0.1.0 from ", 10000));
    assert_true(hx_wait_log(&m, "SIGHUP: every plugin looked at; serving on", 5000));
    assert_true(hx_alive(&m));
    assert_serving(&m, s, "0.1.0", "1");
    finish(&m, &s);
}

/* -- HA: a standby reloads its own plugin ---------------------------------------- */

static void test_standby_reloads_in_place_and_stays_ready(void **state)
{
    (void)state;
    char out[4096];
    hc_cluster *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    cur_cluster = c;
    assert_int_equal(hc_init(c, "reload-ha", 1), 0);
    for (int i = 0; i < HC_MASTERS; i++) {
        assert_int_equal(hc_configure(c, i, NULL), 0);
        assert_int_equal(hx_start(&c->m[i], 30000), 0);
    }
    int leader = hc_wait_leader(c, -1, 30000);
    assert_true(leader >= 0);
    int sb = (leader + 1) % HC_MASTERS;
    assert_int_equal(hc_wait_role(c, sb, "standby", 30000), 0);

    int rc = ctl(&c->m[sb], out, sizeof(out), "plugin", "reload", "weight_mgmt", NULL);
    if (rc != 0) fprintf(stderr, "%s", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "weight_mgmt: reloaded 0.1.0 -> 0.1.0 in "));
    assert_true(hx_wait_log(&c->m[sb], "plugin weight_mgmt: reloaded 0.1.0 -> 0.1.0 from ", 2000));
    assert_false(hx_log_contains(&c->m[leader], "plugin weight_mgmt: reloaded"));
    /* Still a standby that can replay (it would take over). */
    assert_int_equal(hc_wait_role(c, sb, "standby", 5000), 0);
    char *role = hc_role(&c->m[sb]);
    assert_non_null(role);
    assert_null(strstr(role, "not-ready"));
    free(role);
    assert_int_equal(ctl(&c->m[sb], out, sizeof(out), "plugin", "list", NULL), 0);
    char want[128];
    snprintf(want, sizeof(want), "weight_mgmt 0.1.0 active abi 1.%d reloadable yes reloads 1 ",
             SMP_ABI_MINOR);
    assert_non_null(strstr(out, want));
    assert_int_equal(ctl(&c->m[leader], out, sizeof(out), "plugin", "list", NULL), 0);
    snprintf(want, sizeof(want), "weight_mgmt 0.1.0 active abi 1.%d reloadable yes reloads 0 ",
             SMP_ABI_MINOR);
    assert_non_null(strstr(out, want));
    assert_int_equal(hc_wait_leader(c, -1, 5000), leader);
}

/* -- disable, enable ------------------------------------------------------------ */

static void test_disable_keeps_kv_and_protects_weights_then_enable(void **state)
{
    (void)state;
    static hx_master m; /* static: teardown still finds them after a failed assertion */
    static weight_store *s;
    char out[4096];
    static uint8_t buf[N_TENSORS][TENSOR_BYTES];
    start(&m, "reload-disable", &s);

    assert_int_equal(ctl(&m, out, sizeof(out), "plugin", "disable", "weight_mgmt", NULL), 0);
    assert_non_null(strstr(out, "weight_mgmt: disabled"));
    assert_int_equal(ctl(&m, out, sizeof(out), "plugin", "disable", "weight_mgmt", NULL), 1);
    assert_non_null(strstr(out, "plugin weight_mgmt is disabled: it is already"));
    assert_int_equal(ctl(&m, out, sizeof(out), "plugin", "reload", "weight_mgmt", NULL), 1);
    assert_non_null(strstr(out, "enable it first"));

    /* Weight RPCs: refused, and say why. */
    int rc = read_all(s, "v1", buf);
    assert_true(rc != 0);
    fprintf(stderr, "weight_get while disabled: %s\n", weight_store_last_error(s));
    assert_non_null(strstr(weight_store_last_error(s), "plugin weight_mgmt is disabled"));

    /* Plain KV works. */
    kvc *c = hx_client(&m);
    assert_non_null(c);
    assert_int_equal(kvc_put_bytes(c, "kv/while-disabled", "hello", 5, SMP_DATA_KV, NULL, 0, NULL), 0);
    char back[16];
    uint64_t len = 0;
    assert_int_equal(kvc_get_into(c, "kv/while-disabled", back, sizeof(back), &len, 1), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(back, "hello", 5);

    /* The revision's objects stay protected: the host refuses every removal
     * touching a group whose owner is disabled, one key or a prefix. */
    char **keys = NULL, *next = NULL;
    size_t n = 0;
    assert_int_equal(kvc_list(c, "weights/", "", 100, &keys, &n, &next), 0);
    fprintf(stderr, "%zu objects under weights/ (first %s)\n", n, n ? keys[0] : "-");
    assert_true(n >= 2); /* the manifest and at least one payload */
    for (size_t i = 0; i < n; i++) {
        assert_true(kvc_remove(c, keys[i]) < 0);
        int exists = 0;
        assert_int_equal(kvc_exists(c, keys[i], &exists), 0);
        assert_true(exists);
    }
    kvc_list_free(keys, n, next);
    uint64_t removed = 0, skipped = 0;
    kvc_remove_prefix(c, "weights/", &removed, &skipped);
    assert_int_equal(removed, 0);
    kvc_close(c);

    assert_int_equal(ctl(&m, out, sizeof(out), "plugin", "enable", "weight_mgmt", NULL), 0);
    assert_non_null(strstr(out, "weight_mgmt: active"));
    assert_int_equal(ctl(&m, out, sizeof(out), "plugin", "enable", "weight_mgmt", NULL), 1);
    assert_non_null(strstr(out, "plugin weight_mgmt is not disabled (it is active)"));
    weight_identity id;
    weight_metadata md;
    set_id(&id, "v1");
    assert_int_equal(weight_get_metadata(s, &id, &md, NULL), 0);
    assert_int_equal(md.availability, WEIGHT_READY);
    assert_serving(&m, s, "0.1.0", "0");
    finish(&m, &s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_reload_under_load_never_fails_a_read, teardown),
        cmocka_unit_test_teardown(test_reload_to_a_build_refusing_the_handoff_rolls_back, teardown),
        cmocka_unit_test_teardown(test_abi_and_negotiation_mismatches_are_refused, teardown),
        cmocka_unit_test_teardown(test_sighup_reloads_every_plugin, teardown),
        cmocka_unit_test_teardown(test_standby_reloads_in_place_and_stays_ready, teardown),
        cmocka_unit_test_teardown(test_disable_keeps_kv_and_protects_weights_then_enable, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
