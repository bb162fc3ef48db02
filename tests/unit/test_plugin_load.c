/* test_plugin_load.c -- loading a plugin library, refusing it, unloading it.
 *
 * Each test plugin under tests/plugins/ stands for one way a library loads or
 * fails: ABI major, minor and tag, required host capabilities, descriptor
 * size, entry symbol and init, registrations refused inside init (an oplog
 * type in the host range, a duplicate type number or name, a duplicate
 * section) and an init that fails after registering. For every refusal the
 * test pins the exact message, the return code, that nothing the plugin
 * registered survives (types, sections, services, ticks, guards, metric
 * families), and that the library is closed again. A good plugin's
 * registrations are pinned as loaded, kept beside a later refusal and
 * described (`store_master --check`); host_plugins_load_all skips disabled
 * entries, unloads what it loaded on the first failure and names the entry
 * of the config file. */
#include "plugin_loader_fixture.h"

/* -- Refusals, one per test plugin ----------------------------------------------- */

static void test_bad_major_is_refused(void **state)
{
    expect_refusal(*state, "bad_major", SMP_ENOTSUP,
                   "bad_major.so: ABI major 2 does not match host ABI major 1");
}

static void test_newer_minor_is_refused(void **state)
{
    char msg[128];
    snprintf(msg, sizeof(msg), "newer_minor.so: ABI minor %d is newer than host ABI minor %d",
             SMP_ABI_MINOR + 1, SMP_ABI_MINOR);
    expect_refusal(*state, "newer_minor", SMP_ENOTSUP, msg);
}

static void test_bad_abi_tag_is_refused(void **state)
{
    char msg[256];
    snprintf(msg, sizeof(msg), "bad_abi_tag.so: ABI tag 0x534d0402 does not match host ABI tag 0x%08x",
             (unsigned)SMP_ABI_TAG);
    expect_refusal(*state, "bad_abi_tag", SMP_ENOTSUP, msg);
}

static void test_unknown_required_cap_is_refused(void **state)
{
    expect_refusal(*state, "unknown_required_cap", SMP_ENOTSUP,
                   "unknown_required_cap.so: required host capabilities 0x100 are not offered "
                   "(host offers 0x7f)");
}

/* A backend offering fewer capabilities refuses what it lacks. */
static void test_required_cap_missing_from_backend(void **state)
{
    fixture *fx = *state;
    host_backend be = fx->be;
    be.host_caps = SMP_HOST_CAP_COLD_TIER;
    host_plugins_set_backend(fx->reg, &be);
    expect_refusal(fx, "good_minimal", SMP_ENOTSUP,
                   "good_minimal.so: required host capabilities 0x5 are not offered (host offers 0x2)");
}

static void test_short_descriptor_is_refused(void **state)
{
    char msg[256];
    snprintf(msg, sizeof(msg), "short_descriptor.so: descriptor struct_size 16 is smaller than ABI 1.0's %zu",
             offsetof(smp_plugin_desc, fini) + sizeof(void (*)(void *)));
    expect_refusal(*state, "short_descriptor", SMP_EINVAL, msg);
}

static void test_null_descriptor_is_refused(void **state)
{
    expect_refusal(*state, "null_descriptor", SMP_EINVAL,
                   "null_descriptor.so: smp_plugin_entry returned no descriptor");
}

static void test_no_init_is_refused(void **state)
{
    expect_refusal(*state, "no_init", SMP_EINVAL, "no_init.so: descriptor has no init");
}

/* The dlerror text is the loader's; the message starts with the file name
 * and the symbol, and carries the text in parentheses. */
static void test_no_entry_symbol_is_refused(void **state)
{
    fixture *fx = *state;
    const char *prefix = "no_entry_symbol.so: no entry symbol smp_plugin_entry (";
    assert_int_equal(load(fx, "no_entry_symbol"), SMP_ENOTFOUND);
    assert_memory_equal(fx->err, prefix, strlen(prefix));
    assert_non_null(strstr(fx->err, "undefined symbol: smp_plugin_entry)"));
    assert_int_equal(fx->err[strlen(fx->err) - 1], ')');
    assert_registry_empty(fx);
    assert_closed("no_entry_symbol");
}

static void test_missing_library_is_refused(void **state)
{
    fixture *fx = *state;
    const char *prefix = "does_not_exist.so: cannot load: ";
    assert_int_equal(load(fx, "does_not_exist"), SMP_EIO);
    assert_memory_equal(fx->err, prefix, strlen(prefix));
    assert_true(strlen(fx->err) > strlen(prefix));
    assert_registry_empty(fx);
}

/* init() ignored the refusal and returned 0: the load fails anyway. */
static void test_host_range_type_fails_closed(void **state)
{
    fixture *fx = *state;
    expect_refusal(fx, "host_range_type", SMP_ERANGE,
                   "host_range_type.so: oplog type 3 (HOST_THREE) is in the host range 1..7");
    assert_null(host_metrics_find(fx->metrics, "host_range_gauge"));
    assert_null(host_plugins_section(fx->reg, "host_range_section"));
}

static void test_duplicate_type_number_is_refused(void **state)
{
    expect_refusal(*state, "duplicate_type", SMP_EEXIST,
                   "duplicate_type.so: oplog type 8 (DUP_B) is already registered as DUP_A by "
                   "duplicate_type.so");
}

static void test_duplicate_type_name_is_refused(void **state)
{
    expect_refusal(*state, "duplicate_type_name", SMP_EEXIST,
                   "duplicate_type_name.so: oplog type 21 (SAME_NAME) has the name of type 20 "
                   "(SAME_NAME) registered by duplicate_type_name.so");
}

/* init() returned SMP_EIO after the refusal: the refusal is reported. */
static void test_duplicate_section_is_refused(void **state)
{
    expect_refusal(*state, "duplicate_section", SMP_EEXIST,
                   "duplicate_section.so: snapshot section 'weight_metadata' is already registered "
                   "by duplicate_section.so");
}

/* Every registration was accepted, then init() failed: all of it is undone
 * and fini() (which traps) is not called. */
static void test_init_failure_undoes_every_registration(void **state)
{
    fixture *fx = *state;
    expect_refusal(fx, "init_fails_after_registering", SMP_EIO,
                   "init_fails_after_registering.so: init failed: SMP_EIO (-8)");
    assert_null(host_metrics_find(fx->metrics, "failing_total"));
}

/* -- A good plugin ------------------------------------------------------------------ */

static void test_good_plugin_registers_everything(void **state)
{
    fixture *fx = *state;
    const host_oplog_type_reg *t;
    const host_section_reg *s;
    const host_rpc_reg *r;
    host_tick_reg *k;
    host_plugin *p;

    assert_int_equal(load(fx, "good_minimal"), SMP_OK);
    assert_string_equal(fx->err, "");
    assert_int_equal(host_plugins_count(fx->reg), 1);
    p = host_plugins_at(fx->reg, 0);
    assert_string_equal(host_plugin_desc(p)->name, "good_minimal");
    assert_string_equal(host_plugin_desc(p)->version, "1.2.3");
    assert_string_equal(host_plugin_path(p), fx->paths[0]);
    assert_non_null(host_plugin_state(p));

    assert_int_equal(host_plugins_n_oplog_types(fx->reg), 1);
    t = host_plugins_oplog_type(fx->reg, 8);
    assert_non_null(t);
    assert_ptr_equal(host_plugins_oplog_type_at(fx->reg, 0), t);
    assert_ptr_equal(t->owner, p);
    assert_string_equal(t->t.name, "GOOD_RECORD");
    assert_string_equal(t->t.gate, "weight_management_oplog_capability_confirmed");
    assert_int_equal(t->t.min_encver, 1);
    assert_int_equal(t->t.max_encver, 2);
    assert_null(host_plugins_oplog_type(fx->reg, 9));

    assert_int_equal(host_plugins_n_sections(fx->reg), 1);
    s = host_plugins_section(fx->reg, "good_section");
    assert_non_null(s);
    assert_ptr_equal(host_plugins_section_at(fx->reg, 0), s);
    assert_int_equal(s->s.encver, 3);
    assert_ptr_equal(s->owner, p);

    r = host_plugins_rpc_service(fx->reg, 16);
    assert_non_null(r);
    assert_string_equal(r->s.name, "good_service");
    assert_int_equal(r->s.n_methods, 2);
    assert_string_equal(r->s.methods[1].name, "echo");

    assert_int_equal(host_plugins_n_ticks(fx->reg), 1);
    k = host_plugins_tick_at(fx->reg, 0);
    assert_int_equal(k->t.period_ms, 500);
    assert_int_equal(k->t.leader_only, 1);
    assert_ptr_equal(k->owner, p);

    assert_true(host_plugins_has_guard(fx->reg));
    assert_non_null(host_metrics_find(fx->metrics, "good_minimal_events_total"));

    /* Destroying the registry calls fini (which frees the state) and closes. */
    host_plugins_destroy(fx->reg);
    fx->reg = NULL;
    assert_closed("good_minimal");
    assert_null(host_metrics_find(fx->metrics, "good_minimal_events_total"));
    assert_null(host_metrics_find(fx->metrics, "host_guard_vetoes_total"));
}

/* A refused plugin loaded after a good one leaves the good one intact. */
static void test_failure_after_good_plugin_keeps_it(void **state)
{
    fixture *fx = *state;
    assert_int_equal(load(fx, "good_minimal"), SMP_OK);
    assert_int_equal(load(fx, "duplicate_type"), SMP_EEXIST);
    assert_string_equal(fx->err, "duplicate_type.so: oplog type 8 (DUP_A) is already registered as "
                                 "GOOD_RECORD by good_minimal.so");
    assert_closed("duplicate_type");
    assert_int_equal(host_plugins_count(fx->reg), 1);
    assert_int_equal(host_plugins_n_oplog_types(fx->reg), 1);
    assert_string_equal(host_plugins_oplog_type(fx->reg, 8)->t.name, "GOOD_RECORD");
    assert_int_equal(host_plugins_n_sections(fx->reg), 1);
    assert_null(host_plugins_section(fx->reg, "dup_type_section"));
    assert_int_equal(host_plugins_n_ticks(fx->reg), 1);
    assert_non_null(host_plugins_rpc_service(fx->reg, 16));
    assert_true(host_plugins_has_guard(fx->reg));
    assert_int_equal(n_families(fx->metrics), 2);

    /* A second good plugin and another failure in between keep the order. */
    assert_int_equal(load(fx, "init_fails_after_registering"), SMP_EIO);
    assert_int_equal(load(fx, "good_other"), SMP_OK);
    assert_int_equal(host_plugins_count(fx->reg), 2);
    assert_int_equal(host_plugins_oplog_type_at(fx->reg, 0)->t.type, 8);
    assert_int_equal(host_plugins_oplog_type_at(fx->reg, 1)->t.type, 13);
    assert_null(host_plugins_rpc_service(fx->reg, 17));
}

/* Loading the same library twice fails on its own duplicate registrations
 * and keeps the first copy working. */
static void test_same_plugin_twice_is_refused(void **state)
{
    fixture *fx = *state;
    assert_int_equal(load(fx, "good_minimal"), SMP_OK);
    assert_int_equal(load(fx, "good_minimal"), SMP_EEXIST);
    assert_string_equal(fx->err, "good_minimal.so: oplog type 8 (GOOD_RECORD) is already registered "
                                 "as GOOD_RECORD by good_minimal.so");
    assert_int_equal(host_plugins_count(fx->reg), 1);
    assert_int_equal(host_plugins_n_oplog_types(fx->reg), 1);
}

/* -- describe ------------------------------------------------------------------------------------- */

static void test_describe_output(void **state)
{
    fixture *fx = *state;
    char *text = NULL;
    size_t len = 0;
    char line[1024];
    FILE *out;

    assert_int_equal(load(fx, "good_minimal"), SMP_OK);
    assert_int_equal(load(fx, "good_other"), SMP_OK);
    out = open_memstream(&text, &len);
    assert_non_null(out);
    host_plugins_describe(fx->reg, out);
    fclose(out);

    snprintf(line, sizeof(line), "host abi 1.%d tag 0x%08x caps 0x7f (groups,cold_tier,durable_oplog,"
             "ha_standby,rpc_dispatch,metrics,state_handoff)\nplugins 2\n", SMP_ABI_MINOR,
             (unsigned)SMP_ABI_TAG);
    assert_memory_equal(text, line, strlen(line));
    snprintf(line, sizeof(line), "plugin good_minimal 1.2.3\n  path %s\n", fx->paths[0]);
    assert_non_null(strstr(text, line));
    snprintf(line, sizeof(line), "  abi 1.%d (host 1.%d) tag 0x%08x\n", SMP_ABI_MINOR, SMP_ABI_MINOR,
             (unsigned)SMP_ABI_TAG);
    assert_non_null(strstr(text, line));
    assert_non_null(strstr(text,
                           "  required host caps 0x5 (groups,durable_oplog)\n"
                           "  optional host caps 0x10000000020 (metrics,bit40)\n"
                           "  plugin caps 0x1 (object_guard)\n"
                           "  type 8 GOOD_RECORD encver 1..2 gate weight_management_oplog_capability_confirmed\n"
                           "  section good_section encver 3\n"
                           "  guard yes\n"
                           "  tick period 500 ms leader_only yes\n"
                           "  rpc service 16 good_service methods 1:ping 2:echo\n"
                           "  events 0x12 (object_completed,node_down)\n"
                           "  metric good_minimal_events_total\n"
                           "plugin good_other 0.1\n"));
    assert_non_null(strstr(text,
                           "  required host caps 0x0 (-)\n"
                           "  optional host caps 0x0 (-)\n"
                           "  plugin caps 0x0 (-)\n"
                           "  type 13 OTHER_RECORD encver 1..1 gate -\n"
                           "  guard yes\n"
                           "  tick no\n"
                           "  events 0x0 (-)\n"
                           "  key space other/\n"));
    free(text);
}

/* -- load_all ---------------------------------------------------------------------------------------- */

static void test_load_all_skips_disabled(void **state)
{
    fixture *fx = *state;
    host_config_plugin *a = entry_for(fx, "good_minimal", NULL);
    entry_for(fx, "bad_major", NULL)->enabled = 0;
    entry_for(fx, "good_other", NULL);
    fx->cfg.plugins = a;
    fx->cfg.n_plugins = 3;
    assert_int_equal(host_plugins_load_all(fx->reg, fx->err, sizeof(fx->err)), SMP_OK);
    assert_int_equal(host_plugins_count(fx->reg), 2);
    assert_string_equal(host_plugin_desc(host_plugins_at(fx->reg, 0))->name, "good_minimal");
    assert_string_equal(host_plugin_desc(host_plugins_at(fx->reg, 1))->name, "good_other");
    assert_closed("bad_major");
}

/* The first failure unloads what this call loaded and reports the cause. */
static void test_load_all_unloads_on_failure(void **state)
{
    fixture *fx = *state;
    host_config_plugin *a = entry_for(fx, "good_minimal", NULL);
    entry_for(fx, "good_other", NULL);
    entry_for(fx, "bad_major", NULL);
    entry_for(fx, "register_after_init", NULL);
    fx->cfg.plugins = a;
    fx->cfg.n_plugins = 4;
    assert_int_equal(host_plugins_load_all(fx->reg, fx->err, sizeof(fx->err)), SMP_ENOTSUP);
    assert_string_equal(fx->err, "bad_major.so: ABI major 2 does not match host ABI major 1");
    assert_registry_empty(fx);
    assert_closed("good_minimal");
    assert_closed("good_other");
    assert_closed("register_after_init");
}

/* With a config read from a file, the failure names the entry as the
 * loader's messages do: plugins[i].path on its path's line for a library
 * refused, plugins[i].config on its config: line when the plugin's init
 * failed (its own message, whose lines are the file's, came just before). */
static void test_load_all_names_the_entry(void **state)
{
    fixture *fx = *state;
    host_config_plugin *a = entry_for(fx, "good_minimal", NULL);
    host_config_plugin *b = entry_for(fx, "bad_major", NULL);
    char source[] = "x.yaml";
    fx->cfg.source = source;
    fx->cfg.plugins = a;
    fx->cfg.n_plugins = 2;
    b->line = 6;
    b->path_line = 7;
    b->config_line = 8;
    assert_int_equal(host_plugins_load_all(fx->reg, fx->err, sizeof(fx->err)), SMP_ENOTSUP);
    assert_string_equal(fx->err, "x.yaml:7: plugins[1].path: bad_major.so: ABI major 2 does not "
                                 "match host ABI major 1");
    assert_registry_empty(fx);

    host_config_plugin *c = entry_for(fx, "init_fails_after_registering", NULL);
    c->path_line = 3;
    c->config_line = 9;
    fx->cfg.plugins = c;
    fx->cfg.n_plugins = 1;
    assert_int_equal(host_plugins_load_all(fx->reg, fx->err, sizeof(fx->err)), SMP_EIO);
    assert_string_equal(fx->err, "x.yaml:9: plugins[0].config: init_fails_after_registering.so: "
                                 "init failed: SMP_EIO (-8); the plugin's own line above says why "
                                 "(a line number there is a line of x.yaml)");
    c->config_line = 0; /* no config: written: the path's line */
    assert_int_equal(host_plugins_load_all(fx->reg, fx->err, sizeof(fx->err)), SMP_EIO);
    assert_non_null(strstr(fx->err, "x.yaml:3: plugins[0].config: "));
    assert_registry_empty(fx);
    fx->cfg.source = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_major_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_minor_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_abi_tag_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_required_cap_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_required_cap_missing_from_backend, setup, teardown),
        cmocka_unit_test_setup_teardown(test_short_descriptor_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_null_descriptor_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_init_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_entry_symbol_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_library_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_range_type_fails_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_type_number_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_type_name_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_section_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_failure_undoes_every_registration, setup, teardown),
        cmocka_unit_test_setup_teardown(test_good_plugin_registers_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_after_good_plugin_keeps_it, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_plugin_twice_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_describe_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_all_skips_disabled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_all_unloads_on_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_all_names_the_entry, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
