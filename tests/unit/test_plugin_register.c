/* test_plugin_register.c -- what a plugin may register, when, and the gated
 * oplog_append path.
 *
 * Registration rules are probed from inside init: register_probe's init runs
 * a hook the test sets, and each refused oplog type, section, guard, tick, rpc
 * service, metric or event handler fails the load with its message and leaves
 * nothing. Key spaces (ABI 1.9) are claimed only in init, checked for
 * emptiness, length, UTF-8 and overlap, and looked up by key; weight_mgmt.so
 * claims its own when the host's table has the member. A registration after
 * init is refused. An oplog type's gate must be a boolean config flag (the
 * cluster's or the plugin block's), and oplog_append reaches the recording
 * backend only for the caller's own type, a valid encoding version, a leader
 * and, under HA, a confirmed gate. */
#include "plugin_loader_fixture.h"

/* -- Gates ------------------------------------------------------------------------- */

static void test_gate_that_is_not_a_boolean_flag_is_refused(void **state)
{
    expect_refusal(*state, "bad_gate", SMP_EINVAL,
                   "bad_gate.so: oplog type 80 (GATED) gate 'foo' is not a boolean config flag");
}

/* The same gate name is accepted when the plugin's own block has it as a
 * boolean, and confirmed exactly when it is true. */
static void test_gate_from_plugin_block(void **state)
{
    fixture *fx = *state;
    host_config_node flag = {.kind = HOST_CFG_SCALAR, .line = 3, .key = "foo", .scalar = "false"};
    host_config_node *items[1] = {&flag};
    host_config_node block = {.kind = HOST_CFG_MAP, .line = 2, .items = items, .n_items = 1};
    host_plugin *p;

    assert_int_equal(host_plugins_load(fx->reg, entry_for(fx, "bad_gate", &block), fx->err,
                                       sizeof(fx->err)), SMP_OK);
    p = host_plugins_at(fx->reg, 0);
    assert_false(host_plugins_gate_confirmed(fx->reg, p, "foo"));
    flag.scalar = "true";
    assert_true(host_plugins_gate_confirmed(fx->reg, p, "foo"));
    assert_false(host_plugins_gate_confirmed(fx->reg, p, "bar"));
    assert_false(host_plugins_gate_confirmed(fx->reg, p, "weight_lineage_oplog_capability_confirmed"));
    fx->cfg.cluster.weight_lineage_oplog_capability_confirmed = 1;
    assert_true(host_plugins_gate_confirmed(fx->reg, p, "weight_lineage_oplog_capability_confirmed"));
    /* A string is not a flag. */
    host_plugins_destroy(fx->reg);
    assert_closed("bad_gate");
    assert_int_equal(host_plugins_create(&fx->reg, &fx->cfg, fx->metrics, &fx->be), SMP_OK);
    flag.scalar = "yes";
    assert_int_equal(host_plugins_load(fx->reg, entry_for(fx, "bad_gate", &block), fx->err,
                                       sizeof(fx->err)), SMP_EINVAL);
    assert_string_equal(fx->err, "bad_gate.so: oplog type 80 (GATED) gate 'foo' is not a boolean config flag");
}

static void test_register_after_init_is_refused(void **state)
{
    fixture *fx = *state;
    int (*try_all)(void);

    assert_int_equal(load(fx, "register_after_init"), SMP_OK);
    *(void **)&try_all = plugin_sym("register_after_init", "register_after_init_try_all");
    assert_int_equal(try_all(), 8);
    assert_int_equal(host_plugins_n_key_spaces(fx->reg), 0);
    assert_int_equal(host_plugins_count(fx->reg), 1);
    assert_int_equal(host_plugins_n_oplog_types(fx->reg), 0);
    assert_int_equal(host_plugins_n_sections(fx->reg), 0);
    assert_int_equal(host_plugins_n_ticks(fx->reg), 0);
    assert_null(host_plugins_rpc_service(fx->reg, 60));
    assert_false(host_plugins_has_guard(fx->reg));
    assert_null(host_metrics_find(fx->metrics, "late_total"));
}

static void test_good_plugin_register_late_is_refused(void **state)
{
    fixture *fx = *state;
    int (*late)(void);
    assert_int_equal(load(fx, "good_minimal"), SMP_OK);
    *(void **)&late = plugin_sym("good_minimal", "good_minimal_register_late");
    assert_int_equal(late(), SMP_ESTATE);
    assert_int_equal(host_plugins_n_oplog_types(fx->reg), 1);
    assert_null(host_plugins_oplog_type(fx->reg, 30));
}

/* -- oplog_append ----------------------------------------------------------------------- */

static void test_oplog_append_gating(void **state)
{
    fixture *fx = *state;
    int (*append)(uint16_t, uint16_t);
    int (*other_append)(uint16_t);
    int (*durable_calls)(void);

    assert_int_equal(load(fx, "good_minimal"), SMP_OK);
    assert_int_equal(load(fx, "good_other"), SMP_OK);
    *(void **)&append = plugin_sym("good_minimal", "good_minimal_append");
    *(void **)&other_append = plugin_sym("good_other", "good_other_append");
    *(void **)&durable_calls = plugin_sym("good_minimal", "good_minimal_durable_calls");

    /* HA on, gate not confirmed. */
    fx->cfg.ha_enabled = 1;
    assert_int_equal(append(8, 1), SMP_EGATE);
    assert_int_equal(fx->rec.appends, 0);

    /* Confirmed: reaches the backend with the record. */
    fx->cfg.cluster.weight_management_oplog_capability_confirmed = 1;
    assert_int_equal(append(8, 2), SMP_OK);
    assert_int_equal(fx->rec.appends, 1);
    assert_int_equal(fx->rec.type, 8);
    assert_int_equal(fx->rec.encver, 2);
    assert_int_equal(fx->rec.len, 7);
    assert_memory_equal(fx->rec.payload, "payload", 7);
    assert_non_null(fx->rec.cb);
    assert_int_equal(durable_calls(), 0); /* never from inside the call */
    fx->rec.cb(fx->rec.cb_arg, SMP_OK, 1);
    assert_int_equal(durable_calls(), 1);

    /* Encoding version outside 1..2. */
    assert_int_equal(append(8, 3), SMP_ERANGE);
    assert_int_equal(append(8, 0), SMP_ERANGE);
    /* Another plugin's type, and a type nobody registered. */
    assert_int_equal(append(13, 1), SMP_ENOTFOUND);
    assert_int_equal(append(99, 1), SMP_ENOTFOUND);
    assert_int_equal(other_append(8), SMP_ENOTFOUND);
    assert_int_equal(other_append(13), SMP_OK); /* without a callback: none owed */
    assert_null(fx->rec.cb);
    /* A standby. */
    fx->rec.leader = 0;
    assert_int_equal(append(8, 1), SMP_ENOTLEADER);
    /* Not HA: the gate does not apply (leadership still does). */
    fx->rec.leader = 1;
    fx->cfg.ha_enabled = 0;
    fx->cfg.cluster.weight_management_oplog_capability_confirmed = 0;
    assert_int_equal(append(8, 1), SMP_OK);
    assert_int_equal(fx->rec.appends, 3);
    fx->rec.cb(fx->rec.cb_arg, SMP_OK, 3); /* a backend calls back what it accepted */

    /* Without a backend append: not supported; is_leader defaults to 1. */
    host_plugins_set_backend(fx->reg, NULL);
    assert_int_equal(append(8, 1), SMP_ENOTSUP);
    assert_int_equal(fx->rec.appends, 3);
}

/* -- Registration rules, probed from inside init() -------------------------------------------------- */

static int probe_rc[4];

static int rp_replay(void *p, const smp_record *r) { (void)p, (void)r; return SMP_OK; }
static int rp_save(void *p, smp_writer *w) { (void)p, (void)w; return SMP_OK; }
static int rp_check(void *p, const smp_guard_request *r) { (void)p, (void)r; return SMP_GUARD_ALLOW; }
static int rp_tick(void *p, const smp_tick_budget *b, uint64_t *c) { (void)p, (void)b, (void)c; return SMP_TICK_DONE; }
static int rp_rpc(void *p, smp_rpc_call *c, const uint8_t *b, size_t n) { (void)p, (void)c, (void)b, (void)n; return SMP_OK; }

/* Run `fn` as register_probe's init (it returns 0 whatever it saw) and
 * return the load's code; the message is in fx->err. */
static int run_probe(fixture *fx, int (*fn)(smp_host *, const smp_host_api *))
{
    char path[512];
    void *lib = dlopen(plugin_path(path, sizeof(path), "register_probe"), RTLD_NOW | RTLD_LOCAL);
    int rc;
    assert_non_null(lib);
    *(int (**)(smp_host *, const smp_host_api *))dlsym(lib, "register_probe_hook") = fn;
    memset(probe_rc, 0, sizeof(probe_rc));
    rc = load(fx, "register_probe");
    dlclose(lib);
    if (rc < 0) {
        assert_registry_empty(fx);
        assert_closed("register_probe");
    }
    return rc;
}

static int probe_type_no_replay(smp_host *h, const smp_host_api *api)
{
    smp_oplog_type t = {sizeof(t), 40, 1, 1, "NO_REPLAY", NULL, NULL, NULL};
    probe_rc[0] = api->register_oplog_type(h, &t);
    return SMP_OK;
}

static int probe_type_bad_encver(smp_host *h, const smp_host_api *api)
{
    smp_oplog_type a = {sizeof(a), 40, 0, 1, "ZERO_MIN", NULL, rp_replay, NULL};
    smp_oplog_type b = {sizeof(b), 41, 3, 2, "MIN_ABOVE_MAX", NULL, rp_replay, NULL};
    smp_oplog_type c = {sizeof(c), 0, 1, 1, "TYPE_ZERO", NULL, rp_replay, NULL};
    probe_rc[0] = api->register_oplog_type(h, &a);
    probe_rc[1] = api->register_oplog_type(h, &b);
    probe_rc[2] = api->register_oplog_type(h, &c);
    return SMP_OK;
}

static int probe_type_short_struct(smp_host *h, const smp_host_api *api)
{
    smp_oplog_type t = {8, 40, 1, 1, "SHORT", NULL, rp_replay, NULL};
    probe_rc[0] = api->register_oplog_type(h, &t);
    return SMP_OK;
}

/* A struct from a (hypothetical) newer build: its extra tail is ignored. */
static int probe_type_longer_struct(smp_host *h, const smp_host_api *api)
{
    struct {
        smp_oplog_type t;
        uint64_t newer_field;
    } t = {{sizeof(t), 40, 1, 1, "LONGER", NULL, rp_replay, NULL}, 7};
    probe_rc[0] = api->register_oplog_type(h, &t.t);
    return SMP_OK;
}

static int probe_gate_not_bool(smp_host *h, const smp_host_api *api)
{
    smp_oplog_type t = {sizeof(t), 40, 1, 1, "RATIO_GATED", "default_weight_mixed_hot_ratio", rp_replay, NULL};
    probe_rc[0] = api->register_oplog_type(h, &t);
    return SMP_OK;
}

static int probe_section_no_load(smp_host *h, const smp_host_api *api)
{
    smp_snapshot_section s = {sizeof(s), "half", 1, rp_save, NULL};
    probe_rc[0] = api->register_snapshot_section(h, &s);
    return SMP_OK;
}

static int probe_two_guards(smp_host *h, const smp_host_api *api)
{
    smp_guard g = {sizeof(g), rp_check};
    probe_rc[0] = api->register_guard(h, &g);
    probe_rc[1] = api->register_guard(h, &g);
    return SMP_OK;
}

static int probe_ticks(smp_host *h, const smp_host_api *api)
{
    smp_tick zero = {sizeof(zero), 0, 0, rp_tick};
    smp_tick ok = {sizeof(ok), 10, 0, rp_tick};
    probe_rc[0] = api->register_tick(h, &zero);
    probe_rc[1] = api->register_tick(h, &ok);
    probe_rc[2] = api->register_tick(h, &ok);
    return SMP_OK;
}

static int probe_rpc(smp_host *h, const smp_host_api *api)
{
    static const smp_rpc_method one[] = {{sizeof(smp_rpc_method), 1, "a", rp_rpc, SMP_ROLE_ADMIN}};
    static const smp_rpc_method dup[] = {{sizeof(smp_rpc_method), 1, "a", rp_rpc, SMP_ROLE_ADMIN},
                                         {sizeof(smp_rpc_method), 1, "b", rp_rpc, SMP_ROLE_ADMIN}};
    smp_rpc_service host_id = {sizeof(host_id), 15, "host_owned", one, 1};
    smp_rpc_service dup_methods = {sizeof(dup_methods), 20, "dup_methods", dup, 2};
    smp_rpc_service ok = {sizeof(ok), 21, "ok", one, 1};
    probe_rc[0] = api->register_rpc_service(h, &host_id);
    probe_rc[1] = api->register_rpc_service(h, &dup_methods);
    probe_rc[2] = api->register_rpc_service(h, &ok);
    probe_rc[3] = api->register_rpc_service(h, &ok);
    return SMP_OK;
}

static int probe_metrics(smp_host *h, const smp_host_api *api)
{
    smp_metric_desc d = {sizeof(d), SMP_METRIC_GAUGE, "probe_gauge", "h", NULL};
    smp_metric_desc bad = {sizeof(bad), SMP_METRIC_GAUGE, "bad name", "h", NULL};
    smp_metric *m = NULL;
    probe_rc[0] = api->register_metric(h, &d, &m);
    probe_rc[1] = api->register_metric(h, &d, &m);
    probe_rc[2] = api->register_metric(h, &bad, &m);
    return SMP_OK;
}

static int probe_handler_without_callback(smp_host *h, const smp_host_api *api)
{
    smp_event_handler e = {sizeof(e), 0x2, NULL};
    probe_rc[0] = api->register_event_handler(h, &e);
    return SMP_OK;
}

/* -- Key spaces (ABI 1.9) ----------------------------------------------------------------------- */

static const char *probe_claims[HOST_KEY_SPACES_MAX + 2];

/* Claim every prefix of probe_claims (up to a NULL), each answer in
 * probe_rc (the first four). */
static int probe_claim(smp_host *h, const smp_host_api *api)
{
    for (size_t i = 0; probe_claims[i] != NULL; i++) {
        int rc = api->claim_key_space(h, probe_claims[i]);
        if (i < 4) probe_rc[i] = rc;
    }
    return SMP_OK;
}

static int probe_claim_null(smp_host *h, const smp_host_api *api)
{
    probe_rc[0] = api->claim_key_space(h, NULL);
    return SMP_OK;
}

/* run_probe beside the plugins already loaded: a refusal leaves their
 * claims as they were and the library closed. */
static int run_probe_beside(fixture *fx, int (*fn)(smp_host *, const smp_host_api *))
{
    char path[512];
    size_t before = host_plugins_n_key_spaces(fx->reg), loaded = host_plugins_count(fx->reg);
    void *lib = dlopen(plugin_path(path, sizeof(path), "register_probe"), RTLD_NOW | RTLD_LOCAL);
    int rc;
    assert_non_null(lib);
    *(int (**)(smp_host *, const smp_host_api *))dlsym(lib, "register_probe_hook") = fn;
    memset(probe_rc, 0, sizeof(probe_rc));
    rc = load(fx, "register_probe");
    dlclose(lib);
    if (rc < 0) {
        assert_int_equal(host_plugins_count(fx->reg), loaded);
        assert_int_equal(host_plugins_n_key_spaces(fx->reg), before);
        assert_closed("register_probe");
    }
    return rc;
}

/* Load register_probe claiming the prefixes given (NULL-terminated). */
static int run_claims(fixture *fx, ...)
{
    va_list ap;
    size_t n = 0;
    va_start(ap, fx);
    for (const char *c; (c = va_arg(ap, const char *)) != NULL && n < HOST_KEY_SPACES_MAX + 1;)
        probe_claims[n++] = c;
    va_end(ap);
    probe_claims[n] = NULL;
    return run_probe_beside(fx, probe_claim);
}

/* A plugin claims key prefixes in init: refused (the load fails, nothing
 * left, the message naming the plugin and the prefix) when empty or NULL,
 * too long, not UTF-8, overlapping its own or another plugin's claim either
 * way, or past its 16 claims; accepted claims are listed and looked up by
 * key, the prefix copied; a plugin that claims nothing (every one built
 * before ABI 1.9) loads as before. */
static void test_key_space_claims(void **state)
{
    fixture *fx = *state;
    host_key_space ks;
    char long_prefix[HOST_KEY_SPACE_MAX_BYTES + 2];
    char names[HOST_KEY_SPACES_MAX + 1][8];
    char msg[512];

    assert_int_equal(load(fx, "good_minimal"), SMP_OK); /* claims nothing */
    assert_int_equal(host_plugins_n_key_spaces(fx->reg), 0);
    assert_false(host_plugins_key_space_of(fx->reg, "other/x", &ks));
    assert_int_equal(load(fx, "good_other"), SMP_OK);
    assert_int_equal(host_plugins_n_key_spaces(fx->reg), 1);

    assert_int_equal(run_claims(fx, "", NULL), SMP_EINVAL);
    assert_int_equal(probe_rc[0], SMP_EINVAL);
    assert_string_equal(fx->err, "register_probe.so: plugin register_probe claims a key space with "
                                 "an empty prefix (it would hold every key)");
    assert_int_equal(run_probe_beside(fx, probe_claim_null), SMP_EINVAL);
    assert_string_equal(fx->err, "register_probe.so: plugin register_probe claims a key space with "
                                 "no prefix (it would hold every key)");

    memset(long_prefix, 'k', sizeof(long_prefix) - 1);
    long_prefix[sizeof(long_prefix) - 1] = '\0'; /* 1025 bytes */
    assert_int_equal(run_claims(fx, long_prefix, NULL), SMP_ERANGE);
    snprintf(msg, sizeof(msg), "register_probe.so: plugin register_probe claims key space '%.64s...' "
             "of 1025 bytes, longer than a key may be (1024 bytes)", long_prefix);
    assert_string_equal(fx->err, msg);
    long_prefix[HOST_KEY_SPACE_MAX_BYTES] = '\0'; /* 1024: a key's limit, accepted */
    assert_int_equal(run_claims(fx, long_prefix, NULL), SMP_OK);
    assert_int_equal(host_plugins_n_key_spaces(fx->reg), 2);
    assert_true(host_plugins_key_space_of(fx->reg, long_prefix, &ks));
    assert_string_equal(ks.plugin, "register_probe");
    assert_ptr_not_equal(ks.prefix, long_prefix); /* copied */
    host_plugins_destroy(fx->reg); /* register_probe loads once per registry */
    assert_int_equal(host_plugins_create(&fx->reg, &fx->cfg, fx->metrics, &fx->be), SMP_OK);
    assert_int_equal(load(fx, "good_other"), SMP_OK);

    assert_int_equal(run_claims(fx, "bad\xff/", NULL), SMP_EINVAL);
    assert_string_equal(fx->err, "register_probe.so: plugin register_probe claims key space "
                                 "'bad\xff/', which is not valid UTF-8 (no key is)");

    /* Overlaps, either way, with another plugin's claim or its own. */
    assert_int_equal(run_claims(fx, "other/deeper/", NULL), SMP_EEXIST);
    assert_string_equal(fx->err, "register_probe.so: plugin register_probe claims key space "
                                 "'other/deeper/', which overlaps key space 'other/' of plugin "
                                 "good_other (one begins with the other)");
    assert_int_equal(run_claims(fx, "oth", NULL), SMP_EEXIST);
    assert_string_equal(fx->err, "register_probe.so: plugin register_probe claims key space 'oth', "
                                 "which overlaps key space 'other/' of plugin good_other (one "
                                 "begins with the other)");
    assert_int_equal(run_claims(fx, "mine/", "mine/sub/", NULL), SMP_EEXIST);
    assert_int_equal(probe_rc[0], SMP_OK);
    assert_int_equal(probe_rc[1], SMP_EEXIST);
    assert_string_equal(fx->err, "register_probe.so: plugin register_probe claims key space "
                                 "'mine/sub/', which overlaps its own key space 'mine/' (one begins "
                                 "with the other)");
    assert_int_equal(run_claims(fx, "mine/", "mine/", NULL), SMP_EEXIST);
    assert_int_equal(host_plugins_n_key_spaces(fx->reg), 1); /* good_other's alone: undone */

    /* At most 16 claims per plugin. */
    for (size_t i = 0; i <= HOST_KEY_SPACES_MAX; i++) {
        snprintf(names[i], sizeof(names[i]), "k%02zu/", i);
        probe_claims[i] = names[i];
    }
    probe_claims[HOST_KEY_SPACES_MAX + 1] = NULL;
    assert_int_equal(run_probe_beside(fx, probe_claim), SMP_ERANGE);
    assert_string_equal(fx->err, "register_probe.so: plugin register_probe claims key space 'k16/' "
                                 "beyond its 16 key spaces");
    assert_int_equal(host_plugins_n_key_spaces(fx->reg), 1);

    /* Accepted: listed in load order, looked up by key (a key equal to the
     * prefix is in it; a key the prefix begins with only partly is not). */
    assert_int_equal(run_claims(fx, "probe/", "other", NULL), SMP_EEXIST);
    assert_int_equal(run_claims(fx, "probe/", "p2/", NULL), SMP_OK);
    assert_int_equal(host_plugins_n_key_spaces(fx->reg), 3);
    assert_true(host_plugins_key_space_at(fx->reg, 0, &ks));
    assert_string_equal(ks.prefix, "other/");
    assert_string_equal(ks.plugin, "good_other");
    assert_false(ks.disabled);
    assert_true(host_plugins_key_space_at(fx->reg, 2, &ks));
    assert_string_equal(ks.prefix, "p2/");
    assert_string_equal(ks.plugin, "register_probe");
    assert_false(host_plugins_key_space_at(fx->reg, 3, &ks));
    assert_true(host_plugins_key_space_of(fx->reg, "probe/", &ks));
    assert_string_equal(ks.prefix, "probe/");
    assert_true(host_plugins_key_space_of(fx->reg, "other/a/b", &ks));
    assert_string_equal(ks.plugin, "good_other");
    assert_false(host_plugins_key_space_of(fx->reg, "probe", &ks));
    assert_false(host_plugins_key_space_of(fx->reg, "p2", &ks));
    assert_false(host_plugins_key_space_of(NULL, "p2/", &ks));
    assert_false(host_plugins_key_space_of(fx->reg, NULL, &ks));
}

/* weight_mgmt.so's own init, run from inside register_probe's (so that what
 * it registers lands in a real registry) with a host table of wm_table_size
 * bytes; static, as the plugin keeps the table. */
static smp_host_api wm_table;
static size_t wm_table_size;
static const smp_plugin_desc *wm_desc;
static void *wm_state;

static int probe_weight_mgmt(smp_host *h, const smp_host_api *api)
{
    wm_table = *api;
    wm_table.struct_size = (uint32_t)wm_table_size;
    probe_rc[0] = wm_desc->init(h, &wm_table, &wm_state);
    return SMP_OK;
}

/* weight_mgmt.so claims "weights/" from a host of ABI 1.9; from a host
 * whose table ends before claim_key_space (ABI 1.8) it claims nothing and
 * its init succeeds all the same. */
static void test_weight_mgmt_claims_its_key_space_when_the_host_can(void **state)
{
    fixture *fx = *state;
    host_key_space ks;
    void *lib = dlopen(WM_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    smp_plugin_entry_fn entry;
    assert_non_null(lib);
    fx->cfg.cluster.default_weight_preferred_residency = HOST_RESIDENCY_MIXED; /* its defaults */
    fx->cfg.cluster.default_weight_migration_mode = HOST_MODE_AUTO;
    fx->cfg.cluster.weight_migration_cooldown_ms = 30000;
    fx->cfg.cluster.weight_migration_max_members_per_round = 64;
    fx->cfg.cluster.weight_migration_max_bytes_per_round = 1073741824u;
    *(void **)&entry = dlsym(lib, SMP_PLUGIN_ENTRY_SYMBOL);
    assert_non_null(entry);
    wm_desc = entry();
    const size_t sizes[2] = {sizeof(smp_host_api), offsetof(smp_host_api, claim_key_space)};
    for (int i = 0; i < 2; i++) {
        wm_table_size = sizes[i];
        wm_state = NULL;
        assert_int_equal(run_probe_beside(fx, probe_weight_mgmt), SMP_OK);
        assert_int_equal(probe_rc[0], SMP_OK);
        assert_non_null(wm_state);
        assert_int_equal(host_plugins_n_key_spaces(fx->reg), i == 0 ? 1 : 0);
        assert_int_equal(host_plugins_key_space_of(fx->reg, "weights/t/ns/r/v/1/manifest", &ks),
                         i == 0);
        if (i == 0) assert_string_equal(ks.prefix, "weights/");
        assert_true(host_plugins_oplog_type(fx->reg, 8) != NULL); /* the rest is registered */
        wm_desc->fini(wm_state);
        host_plugins_destroy(fx->reg); /* its registrations go, never called again */
        assert_int_equal(host_plugins_create(&fx->reg, &fx->cfg, fx->metrics, &fx->be), SMP_OK);
    }
    dlclose(lib);
}

static void test_registration_rules(void **state)
{
    fixture *fx = *state;
    char msg[256];

    assert_int_equal(run_probe(fx, probe_type_no_replay), SMP_EINVAL);
    assert_int_equal(probe_rc[0], SMP_EINVAL);
    assert_string_equal(fx->err, "register_probe.so: oplog type 40 (NO_REPLAY) has no replay");

    assert_int_equal(run_probe(fx, probe_type_bad_encver), SMP_ERANGE);
    assert_int_equal(probe_rc[0], SMP_ERANGE);
    assert_int_equal(probe_rc[1], SMP_ERANGE);
    assert_int_equal(probe_rc[2], SMP_ERANGE);
    assert_string_equal(fx->err, "register_probe.so: oplog type 40 (ZERO_MIN) has encoding versions "
                                 "0..1 (need 1 <= min <= max)");

    assert_int_equal(run_probe(fx, probe_type_short_struct), SMP_EINVAL);
    snprintf(msg, sizeof(msg), "register_probe.so: oplog type struct_size 8 is smaller than ABI 1.0's %zu",
             offsetof(smp_oplog_type, describe) + sizeof(void *));
    assert_string_equal(fx->err, msg);

    assert_int_equal(run_probe(fx, probe_gate_not_bool), SMP_EINVAL);
    assert_string_equal(fx->err, "register_probe.so: oplog type 40 (RATIO_GATED) gate "
                                 "'default_weight_mixed_hot_ratio' is not a boolean config flag");

    assert_int_equal(run_probe(fx, probe_section_no_load), SMP_EINVAL);
    assert_string_equal(fx->err, "register_probe.so: snapshot section 'half' has no load");

    assert_int_equal(run_probe(fx, probe_two_guards), SMP_EEXIST);
    assert_int_equal(probe_rc[0], SMP_OK);
    assert_int_equal(probe_rc[1], SMP_EEXIST);

    assert_int_equal(run_probe(fx, probe_ticks), SMP_ERANGE);
    assert_int_equal(probe_rc[0], SMP_ERANGE);
    assert_int_equal(probe_rc[1], SMP_OK);
    assert_int_equal(probe_rc[2], SMP_EEXIST);
    assert_string_equal(fx->err, "register_probe.so: tick period_ms 0 is not allowed");

    assert_int_equal(run_probe(fx, probe_rpc), SMP_ERANGE);
    assert_int_equal(probe_rc[0], SMP_ERANGE);
    assert_int_equal(probe_rc[1], SMP_EEXIST);
    assert_int_equal(probe_rc[2], SMP_OK);
    assert_int_equal(probe_rc[3], SMP_EEXIST);
    assert_string_equal(fx->err, "register_probe.so: rpc service 15 (host_owned) is in the host range 0..15");

    assert_int_equal(run_probe(fx, probe_metrics), SMP_EEXIST);
    assert_int_equal(probe_rc[0], SMP_OK);
    assert_int_equal(probe_rc[1], SMP_EEXIST);
    assert_int_equal(probe_rc[2], SMP_EINVAL);
    assert_string_equal(fx->err, "register_probe.so: metric 'probe_gauge' is already registered");

    assert_int_equal(run_probe(fx, probe_handler_without_callback), SMP_EINVAL);
    assert_int_equal(probe_rc[0], SMP_EINVAL);

    /* A longer struct is accepted; the host keeps its own size. */
    assert_int_equal(run_probe(fx, probe_type_longer_struct), SMP_OK);
    assert_int_equal(probe_rc[0], SMP_OK);
    assert_int_equal(host_plugins_oplog_type(fx->reg, 40)->t.struct_size, sizeof(smp_oplog_type));
    host_plugins_destroy(fx->reg);
    fx->reg = NULL;
    assert_closed("register_probe");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gate_that_is_not_a_boolean_flag_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gate_from_plugin_block, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register_after_init_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_good_plugin_register_late_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oplog_append_gating, setup, teardown),
        cmocka_unit_test_setup_teardown(test_registration_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_space_claims, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weight_mgmt_claims_its_key_space_when_the_host_can,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
