/* test_protect_groups.c -- the weight plugin's managed groups stay whole when
 * the plugin is not there, whatever other plugin is loaded.
 *
 * A real store_master with weight_mgmt.so publishes two revisions (HOT, on a
 * 2 MiB segment with eviction watermarks 0.5 / 0.2) and stops. It starts
 * again without the weight plugin: once with no plugin at all (no extra
 * config key is needed: the plugin's records and section are carried), once
 * with the plugin `enabled: false` and tests/plugins/allow_all_guard.so,
 * whose guard allows everything. Either way plain KV works, and every action
 * on a revision's members is refused with SMP_EVETO naming the key: remove,
 * remove by the group's prefix (the whole group), remove-all, put into the
 * group, overwrite, and eviction under memory pressure (plain objects are
 * evicted, as memory.evict_without_cold_copy: true asks; members keep their
 * memory replicas). A client cannot clear the
 * managed flag (SMP_ENOTSUP), nor can the other plugin (SMP_EVETO: the group
 * is weight_mgmt's), whose guard is never asked about the managed groups.
 * Every member is still listed afterwards. Started with the weight plugin
 * again, every revision is READY and every payload byte-identical -- and a
 * revision that lost a member's only copy while the plugin was away is
 * DEGRADED, not READY. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>

#include <cmocka.h>

#include "harness.h"
#include "weight_rpc.h"

#define SEGMENT_BYTES 2097152
#define HIGH_WATERMARK 0.5
#define PAYLOADS 4
#define PAYLOAD_BYTES 65536
#define FILL_BYTES 65536
#define MAX_FILL 64 /* 4 MiB of puts into a 2 MiB segment: pressure is certain */
#define WAIT_MS 30000
#define N_REVS 2
#define MAX_KEYS 64
#define ALLOW_ALL_PATH BUILD_DIR "/lib/testplugins/allow_all_guard.so"
#define ALLOW_ALL_SERVICE 41
#define ALLOW_ALL_UNMANAGE 1
#define ALLOW_ALL_MANAGED_ASKS 2

typedef enum { WEIGHTS_ON, WEIGHTS_ABSENT, WEIGHTS_OFF_ALLOW_ALL } plugins_mode;

typedef struct story {
    wr_fixture f;
    Wmrpc__WeightIdentity ids[N_REVS];
    wr_upload ups[N_REVS];
    char *members[MAX_KEYS]; /* every key of both revisions, sorted by listing */
    size_t n_members;
} story;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* (Re)configure the master's plugins and start it. */
static void start_with(story *s, plugins_mode mode)
{
    char cfg[2048], plugins[1024];
    switch (mode) {
    case WEIGHTS_ON:
        snprintf(plugins, sizeof(plugins),
                 "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n"
                 "    config:\n      tick_period_ms: 50\n", BUILD_DIR);
        break;
    case WEIGHTS_ABSENT: /* no plugins key would have the harness load weight_mgmt */
        snprintf(plugins, sizeof(plugins), "plugins: []\n");
        break;
    case WEIGHTS_OFF_ALLOW_ALL:
        snprintf(plugins, sizeof(plugins),
                 "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    enabled: false\n"
                 "  - path: \"%s\"\n", BUILD_DIR, ALLOW_ALL_PATH);
        break;
    }
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: %d\n  cold_dir: \"%s/cold\"\n"
             "memory:\n  high_watermark: %.1f\n  low_watermark: 0.2\n  evict_without_cold_copy: true\n%s",
             s->f.m.dir, SEGMENT_BYTES, s->f.m.dir, HIGH_WATERMARK, plugins);
    assert_int_equal(hx_reconfigure(&s->f.m, cfg), 0);
    assert_int_equal(hx_start(&s->f.m, 10000), 0);
    wr_connect(&s->f);
}

static void stop(story *s)
{
    wr_disconnect(&s->f);
    assert_int_equal(hx_stop(&s->f.m), 0);
}

/* Every key under prefix, sorted (the listing's order), into keys. */
static size_t list_keys(kvc *c, const char *prefix, char **keys, size_t cap)
{
    char **page = NULL, *next = NULL;
    size_t n = 0;
    assert_int_equal(kvc_list(c, prefix, NULL, 1000, &page, &n, &next), 0);
    assert_string_equal(next, "");
    assert_true(n <= cap);
    for (size_t i = 0; i < n; i++) keys[i] = strdup(page[i]);
    kvc_list_free(page, n, next);
    return n;
}

static void free_keys(char **keys, size_t n)
{
    for (size_t i = 0; i < n; i++) free(keys[i]);
}

/* Phase 1: two READY revisions, published with the plugin loaded. */
static void publish_revisions(story *s, const char *name)
{
    assert_int_equal(hx_init(&s->f.m, name, NULL), 0);
    start_with(s, WEIGHTS_ON);
    static const char *const res[N_REVS] = {"llama", "mistral"};
    for (int r = 0; r < N_REVS; r++) {
        wr_set_identity(&s->ids[r], "t", "protect", res[r], 1);
        s->ups[r].n = PAYLOADS;
        for (size_t i = 0; i < PAYLOADS; i++) s->ups[r].sizes[i] = PAYLOAD_BYTES + 100 * i;
        Wmrpc__MetadataResponse *m = wr_publish(&s->f, &s->ids[r], WR_RS_HOT, WR_MODE_MANUAL,
                                                &s->ups[r]);
        wmrpc__metadata_response__free_unpacked(m, NULL);
        assert_int_equal(wr_wait_md(&s->f, &s->ids[r], WR_AV_READY, WAIT_MS), 0);
        s->n_members += list_keys(s->f.kv, s->ups[r].group, s->members + s->n_members,
                                  MAX_KEYS - s->n_members);
    }
    assert_int_equal(s->n_members, N_REVS * (PAYLOADS + 1));
    stop(s);
}

static int exists(kvc *c, const char *key)
{
    int e = -1;
    assert_int_equal(kvc_exists(c, key, &e), 0);
    return e;
}

/* The refusal of a member action: SMP_EVETO, naming the key. */
static void assert_veto(kvc *c, int rc, const char *key)
{
    if (rc != SMP_EVETO) fail_msg("%s: expected SMP_EVETO, got %d (%s)", key, rc, kvc_error(c));
    assert_non_null(strstr(kvc_error(c), key));
}

/* Every member listed exactly as it was published. */
static void assert_members_all_there(story *s)
{
    for (int r = 0; r < N_REVS; r++) {
        char *now[MAX_KEYS];
        size_t n = list_keys(s->f.kv, s->ups[r].group, now, MAX_KEYS);
        assert_int_equal(n, PAYLOADS + 1);
        for (size_t i = 0; i < n; i++) assert_string_equal(now[i], s->members[r * (PAYLOADS + 1) + i]);
        free_keys(now, n);
    }
}

/* Plain KV works beside the protected groups. */
static void assert_plain_kv_works(kvc *c, const char *key)
{
    const char *text = "plain bytes, no plugin needed";
    char back[64];
    uint64_t len = 0;
    assert_int_equal(kvc_put_bytes(c, key, text, strlen(text), SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_get_into(c, key, back, sizeof(back), &len, 1), 0);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(back, text, len);
}

/* Memory pressure from plain objects: wait until some are evicted and use is
 * back under the high watermark; no member loses its memory replica. */
static void assert_eviction_spares_members(story *s)
{
    kvc *c = s->f.kv;
    kvc_status st;
    char key[64];
    int filled = 0;
    void *data = calloc(1, FILL_BYTES);
    assert_non_null(data);
    for (; filled < MAX_FILL; filled++) {
        snprintf(key, sizeof(key), "fill/%03d", filled);
        int rc = kvc_put_bytes(c, key, data, FILL_BYTES, SMP_DATA_KV, NULL, 0, NULL);
        if (rc == SMP_ENOSPC) break;
        assert_int_equal(rc, 0);
        assert_int_equal(kvc_status_get(c, &st), 0);
        if ((double)st.memory_used > HIGH_WATERMARK * (double)st.memory_capacity) {
            filled++;
            break;
        }
    }
    free(data);
    assert_true(filled > 0);
    int evicted = 0;
    for (int waited = 0;; waited += 20) {
        assert_int_equal(kvc_status_get(c, &st), 0);
        evicted = 0;
        for (int i = 0; i < filled; i++) {
            snprintf(key, sizeof(key), "fill/%03d", i);
            evicted += !exists(c, key);
        }
        if ((double)st.memory_used <= HIGH_WATERMARK * (double)st.memory_capacity && evicted > 0)
            break;
        if (waited >= WAIT_MS)
            fail_msg("no eviction after %d ms: used %llu of %llu, %d of %d evicted", waited,
                     (unsigned long long)st.memory_used, (unsigned long long)st.memory_capacity,
                     evicted, filled);
        sleep_ms(20);
    }
    /* an eviction removes data: the master says so */
    for (int waited = 0; !hx_log_contains(&s->f.m, "objects removed (they had no cold copy): fill/");
         waited += 20) {
        if (waited >= WAIT_MS) fail_msg("the master's log does not name the eviction");
        sleep_ms(20);
    }
    for (size_t i = 0; i < s->n_members; i++) {
        kvc_object o;
        assert_int_equal(kvc_get(c, s->members[i], &o), 0);
        int mem = 0;
        for (size_t k = 0; k < o.n_replicas; k++)
            mem += o.replicas[k].kind == SMP_REPLICA_MEMORY && o.replicas[k].status == 1;
        if (mem != 1) fail_msg("%s has %d complete memory replicas after eviction", s->members[i], mem);
    }
}

/* A call to the allow-all plugin's service: its status; the reply body
 * (NUL-terminated) into out when given. */
static int allow_all_call(story *s, uint32_t method, const char *body, char *out, size_t cap)
{
    char err[256];
    rpcc_conn *c = NULL;
    int status = -1;
    uint8_t *resp = NULL;
    size_t len = 0;
    assert_int_equal(rpcc_connect(s->f.m.socket, NULL, &c, err, sizeof(err)), 0);
    assert_int_equal(rpcc_call(c, ALLOW_ALL_SERVICE, method, (const uint8_t *)body, strlen(body),
                               &status, &resp, &len, NULL),
                     0);
    if (out) snprintf(out, cap, "%.*s", (int)len, resp ? (const char *)resp : "");
    free(resp);
    rpcc_close(c);
    return status;
}

/* Phase 2: the weight plugin is not active. */
static void assert_groups_protected(story *s, plugins_mode mode)
{
    kvc *c = s->f.kv;
    const char *member = s->members[1], *group = s->ups[0].group;
    char prefix[1200];
    uint64_t removed = 0, skipped = 0;

    assert_plain_kv_works(c, "kv/plain");

    /* Remove of a member, by key: the refusal names the group and the
       plugin that manages it. */
    assert_veto(c, kvc_remove(c, member), member);
    char owned[1400];
    snprintf(owned, sizeof(owned), "the object belongs to group '%s', which plugin weight_mgmt manages",
             group);
    if (strstr(kvc_error(c), owned) == NULL) fail_msg("the refusal said: %s", kvc_error(c));
    /* The group's own prefix: the whole group, still refused. */
    snprintf(prefix, sizeof(prefix), "%s/", group);
    assert_int_equal(kvc_remove_prefix(c, prefix, &removed, &skipped), 0);
    assert_int_equal(removed, 0);
    assert_int_equal(skipped, PAYLOADS + 1); /* the manifest lies under it too */
    assert_int_equal(kvc_remove_prefix(c, group, &removed, &skipped), 0);
    assert_int_equal(removed, 0);
    assert_int_equal(skipped, PAYLOADS + 1);
    /* Remove-all takes the unread plain object only (kv/plain was just
     * read: its read lease keeps it). */
    assert_int_equal(kvc_put_bytes(c, "kv/unread", "x", 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_remove_prefix(c, "", &removed, &skipped), 0);
    assert_int_equal(removed, 1);
    assert_int_equal(skipped, s->n_members + 1);
    assert_int_equal(exists(c, "kv/unread"), 0);
    assert_int_equal(exists(c, "kv/plain"), 1);
    /* A new object into the group, an overwrite of a member (with and
     * without naming the group). */
    char newkey[1200];
    snprintf(newkey, sizeof(newkey), "%s/payload/new", group);
    assert_veto(c, kvc_put_start(c, newkey, 100, SMP_DATA_WEIGHT, group, 0, NULL), newkey);
    assert_int_equal(exists(c, newkey), 0);
    assert_veto(c, kvc_put_start(c, member, 100, SMP_DATA_WEIGHT, group, 1, NULL), member);
    assert_veto(c, kvc_put_start(c, member, 100, SMP_DATA_KV, NULL, 1, NULL), member);
    /* Nobody but the owner clears the flag. */
    assert_int_equal(kvc_group_set_managed(c, group, 0), SMP_ENOTSUP);
    assert_non_null(strstr(kvc_error(c), "only by the plugin that owns the group"));
    if (mode == WEIGHTS_OFF_ALLOW_ALL) {
        char reply[64];
        assert_int_equal(allow_all_call(s, ALLOW_ALL_UNMANAGE, group, NULL, 0), SMP_EVETO);
        assert_veto(c, kvc_remove(c, member), member); /* still managed */
        assert_int_equal(allow_all_call(s, ALLOW_ALL_MANAGED_ASKS, "", reply, sizeof(reply)), 0);
        assert_string_equal(reply, "0"); /* never asked about the weight groups */
    }
    assert_members_all_there(s);

    assert_eviction_spares_members(s);
    assert_members_all_there(s);
    assert_plain_kv_works(c, "kv/plain-again");
}

/* Phase 3: the plugin is back; every revision READY, every byte as put. */
static void assert_revisions_intact(story *s)
{
    for (int r = 0; r < N_REVS; r++) {
        assert_int_equal(wr_wait_md(&s->f, &s->ids[r], WR_AV_READY, WAIT_MS), 0);
        assert_int_equal(wr_is_exist(&s->f, &s->ids[r]), 1);
        const wr_upload *u = &s->ups[r];
        for (size_t i = 0; i < u->n; i++) {
            char key[1200];
            wr_payload_key(u, i, key, sizeof(key));
            unsigned char *data = malloc(u->sizes[i]);
            uint64_t len = 0;
            assert_non_null(data);
            assert_int_equal(kvc_get_into(s->f.kv, key, data, u->sizes[i], &len, 1), 0);
            assert_int_equal(len, u->sizes[i]);
            for (uint64_t b = 0; b < len; b++)
                if (data[b] != (unsigned char)(i * 31 + b)) fail_msg("%s differs at byte %llu", key, (unsigned long long)b);
            free(data);
        }
        char manifest[64];
        uint64_t len = 0;
        assert_int_equal(kvc_get_into(s->f.kv, u->manifest, manifest, sizeof(manifest), &len, 1), 0);
        assert_int_equal(len, strlen(u->manifest_body));
        assert_memory_equal(manifest, u->manifest_body, len);
    }
}

static void run_story(story *s, const char *name, plugins_mode mode)
{
    publish_revisions(s, name);
    start_with(s, mode);
    assert_groups_protected(s, mode);
    stop(s);
    /* The state the plugin finds is the one it left, restarted once more
     * without it first (carried through a restart, not only kept in memory). */
    start_with(s, mode);
    assert_members_all_there(s);
    stop(s);
    start_with(s, WEIGHTS_ON);
    assert_revisions_intact(s);
    stop(s);
}

/* The name of key's cold file (its complete cold replica) into path. */
static void cold_path_of(kvc *c, const char *key, char *path, size_t cap)
{
    kvc_object o;
    assert_int_equal(kvc_get(c, key, &o), 0);
    for (size_t k = 0; k < o.n_replicas; k++)
        if (o.replicas[k].kind == SMP_REPLICA_COLD && o.replicas[k].status == 1) {
            snprintf(path, cap, "%s", o.replicas[k].path);
            return;
        }
    fail_msg("%s has no complete cold replica", key);
}

/* A member lost while the plugin was away: the plugin, back, checks every
 * READY revision against the objects before serving it -- the revision
 * whose payload's only (cold) copy was deleted while the master was down is
 * DEGRADED and not readable, never READY over nothing; the other is READY
 * and byte-identical. */
static void test_protect_groups_reconcile_when_the_plugin_returns(void **state)
{
    story *s = *state;
    char key[1200], path[600];
    assert_int_equal(hx_init(&s->f.m, "protect-reconcile", NULL), 0);
    start_with(s, WEIGHTS_ON);
    static const char *const res[N_REVS] = {"cold-one", "hot-one"};
    static const int pref[N_REVS] = {WR_RS_COLD, WR_RS_HOT};
    for (int r = 0; r < N_REVS; r++) {
        wr_set_identity(&s->ids[r], "t", "protect", res[r], 1);
        s->ups[r].n = PAYLOADS;
        for (size_t i = 0; i < PAYLOADS; i++) s->ups[r].sizes[i] = PAYLOAD_BYTES + 100 * i;
        Wmrpc__MetadataResponse *m = wr_publish(&s->f, &s->ids[r], pref[r], WR_MODE_MANUAL,
                                                &s->ups[r]);
        wmrpc__metadata_response__free_unpacked(m, NULL);
        assert_int_equal(wr_wait_md(&s->f, &s->ids[r], WR_AV_READY, WAIT_MS), 0);
    }
    Wmrpc__MetadataResponse *md = wr_get_md(&s->f, &s->ids[0]);
    assert_int_equal(md->metadata->residency, WR_RS_COLD);
    wmrpc__metadata_response__free_unpacked(md, NULL);
    stop(s);

    /* Away: the master runs without the plugin, then stops; a payload's
     * only copy (its cold file) is lost meanwhile. */
    start_with(s, WEIGHTS_ABSENT);
    wr_payload_key(&s->ups[0], 1, key, sizeof(key));
    cold_path_of(s->f.kv, key, path, sizeof(path));
    stop(s);
    char file[1200];
    snprintf(file, sizeof(file), "%s/cold/%s", s->f.m.dir, path); /* the node's cold_dir */
    if (unlink(file) != 0) fail_msg("unlink %s: %s", file, strerror(errno));

    start_with(s, WEIGHTS_ON);
    assert_int_equal(wr_wait_md(&s->f, &s->ids[0], WR_AV_DEGRADED, WAIT_MS), 0);
    assert_int_equal(wr_is_exist(&s->f, &s->ids[0]), 0);
    assert_int_equal(wr_wait_md(&s->f, &s->ids[1], WR_AV_READY, WAIT_MS), 0);
    assert_int_equal(wr_is_exist(&s->f, &s->ids[1]), 1);
    for (size_t i = 0; i < PAYLOADS; i++) {
        wr_payload_key(&s->ups[1], i, key, sizeof(key));
        unsigned char *data = malloc(s->ups[1].sizes[i]);
        uint64_t len = 0;
        assert_non_null(data);
        assert_int_equal(kvc_get_into(s->f.kv, key, data, s->ups[1].sizes[i], &len, 1), 0);
        for (uint64_t b = 0; b < len; b++)
            if (data[b] != (unsigned char)(i * 31 + b)) fail_msg("%s differs at byte %llu", key, (unsigned long long)b);
        free(data);
    }
    stop(s);
}

static int setup(void **state)
{
    *state = calloc(1, sizeof(story));
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    story *s = *state;
    wr_disconnect(&s->f);
    hx_cleanup(&s->f.m);
    free_keys(s->members, s->n_members);
    free(s);
    return 0;
}

/* Absent from the config: no plugin loaded at all, no extra key. */
static void test_protect_groups_without_the_weight_plugin(void **state)
{
    run_story(*state, "protect-absent", WEIGHTS_ABSENT);
}

/* Disabled, with a second plugin whose guard allows everything. */
static void test_protect_groups_with_an_allow_all_guard(void **state)
{
    run_story(*state, "protect-allow", WEIGHTS_OFF_ALLOW_ALL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_protect_groups_without_the_weight_plugin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_protect_groups_with_an_allow_all_guard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_protect_groups_reconcile_when_the_plugin_returns, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
