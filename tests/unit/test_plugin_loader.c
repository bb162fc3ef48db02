/* test_plugin_loader.c -- loading, refusing and unloading plugins.
 *
 * Each test plugin under tests/plugins/ stands for one way a library loads or
 * fails. For every refusal the test pins the exact message, the return code,
 * that nothing the plugin registered survives (types, sections, services,
 * ticks, guards, metric families), and that the library is closed again
 * (dlopen with RTLD_NOLOAD finds nothing). The rest pins what a loaded plugin
 * gets: its registrations, the gated oplog_append path through a recording
 * backend (the master's side), guard vetoes counted per reason, events routed
 * by mask, the config view, and the describe output. */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plugin_host.h"

/* -- The master's side: a backend that records what reaches it ------------- */

typedef struct rec_backend {
    int appends;
    uint16_t type;
    uint16_t encver;
    char payload[32];
    size_t len;
    smp_durable_cb cb;
    void *cb_arg;
    int leader;
    int object_gets;
    uint64_t objects_version;
    uint64_t objects_loss_version;
    uint64_t lease_end;         /* what object_read_lease_end answers */
    char lease_key[32];         /* the key it was last asked about */
    int waits;                  /* rpc_wait_for_nodes calls */
    char wait_key[32];          /* the key of the last one */
    size_t wait_len;            /* and its body's length */
    int removes;
    smp_done_cb done_cb;        /* of the last remove_object */
    void *done_arg;
} rec_backend;

static int rec_oplog_append(void *ctx, uint16_t type, uint16_t encver, const void *payload,
                            size_t len, smp_durable_cb cb, void *arg)
{
    rec_backend *b = ctx;
    b->appends++;
    b->type = type;
    b->encver = encver;
    b->len = len < sizeof(b->payload) ? len : sizeof(b->payload);
    memcpy(b->payload, payload, b->len);
    b->cb = cb;
    b->cb_arg = arg;
    return SMP_OK;
}

static int rec_is_leader(void *ctx)
{
    return ((rec_backend *)ctx)->leader;
}

static int rec_object_get(void *ctx, const char *key, smp_object_info *out)
{
    rec_backend *b = ctx;
    b->object_gets++;
    if (strcmp(key, "k") != 0) return SMP_ENOTFOUND;
    out->size = 42;
    return SMP_OK;
}

static uint64_t rec_objects_version(void *ctx)
{
    return ((rec_backend *)ctx)->objects_version;
}

static uint64_t rec_objects_loss_version(void *ctx)
{
    return ((rec_backend *)ctx)->objects_loss_version;
}

static int rec_rpc_wait_for_nodes(void *ctx, smp_rpc_call *call, const char *key,
                                  const uint8_t *body, size_t len)
{
    rec_backend *r = ctx;
    (void)call, (void)body;
    r->waits++;
    snprintf(r->wait_key, sizeof(r->wait_key), "%s", key);
    r->wait_len = len;
    return 1;
}

static uint64_t rec_object_read_lease_end(void *ctx, const char *key)
{
    rec_backend *r = ctx;
    snprintf(r->lease_key, sizeof(r->lease_key), "%s", key);
    return r->lease_end;
}

static int rec_remove_object(void *ctx, const char *key, smp_done_cb cb, void *arg)
{
    rec_backend *b = ctx;
    (void)key;
    b->removes++;
    b->done_cb = cb;
    b->done_arg = arg;
    return SMP_OK;
}

static void rec_memory_usage(void *ctx, uint64_t *used, uint64_t *capacity)
{
    (void)ctx;
    *used = 10;
    *capacity = 100;
}

static int rec_writer_write(smp_writer *w, const void *buf, size_t len)
{
    (void)w, (void)buf;
    return (int)len;
}

static int visit_none(void *arg, const smp_object_info *obj)
{
    (void)arg, (void)obj;
    return 0;
}

/* -- Fixture ---------------------------------------------------------------- */

#define MAX_PCS 32

typedef struct fixture {
    host_config cfg;
    host_config_node block;       /* an empty plugin block */
    host_config_plugin pcs[MAX_PCS]; /* borrowed by the registry while loaded */
    char paths[MAX_PCS][512];
    size_t n_pcs;
    host_metrics *metrics;
    host_plugins *reg;
    rec_backend rec;
    host_backend be;
    char err[512];
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));
    if (fx == NULL) return -1;
    fx->block.kind = HOST_CFG_MAP;
    fx->cfg.cluster.default_weight_mixed_hot_ratio = 0.5;
    fx->rec.leader = 1;
    fx->be.ctx = &fx->rec;
    fx->be.oplog_append = rec_oplog_append;
    fx->be.is_leader = rec_is_leader;
    fx->be.object_get = rec_object_get;
    fx->be.objects_version = rec_objects_version;
    fx->be.objects_loss_version = rec_objects_loss_version;
    fx->be.object_read_lease_end = rec_object_read_lease_end;
    fx->be.rpc_wait_for_nodes = rec_rpc_wait_for_nodes;
    fx->be.remove_object = rec_remove_object;
    fx->be.memory_usage = rec_memory_usage;
    if (host_metrics_create(&fx->metrics) != SMP_OK) return -1;
    if (host_plugins_create(&fx->reg, &fx->cfg, fx->metrics, &fx->be) != SMP_OK) return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    host_plugins_destroy(fx->reg);
    host_metrics_destroy(fx->metrics);
    free(fx);
    return 0;
}

static const char *plugin_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s.so", TEST_PLUGIN_DIR, name);
    return buf;
}

/* A config entry for the plugin `name` (with `block`, or the empty one),
 * kept in the fixture for as long as the registry may use it. */
static host_config_plugin *entry_for(fixture *fx, const char *name, host_config_node *block)
{
    host_config_plugin *pc;
    assert_true(fx->n_pcs < MAX_PCS);
    pc = &fx->pcs[fx->n_pcs];
    pc->path = (char *)plugin_path(fx->paths[fx->n_pcs], sizeof(fx->paths[0]), name);
    pc->enabled = 1;
    pc->block = block != NULL ? block : &fx->block;
    fx->n_pcs++;
    return pc;
}

static int load(fixture *fx, const char *name)
{
    return host_plugins_load(fx->reg, entry_for(fx, name, NULL), fx->err, sizeof(fx->err));
}

static void assert_closed(const char *name)
{
    char path[512];
    void *h = dlopen(plugin_path(path, sizeof(path), name), RTLD_NOW | RTLD_NOLOAD);
    if (h != NULL) {
        dlclose(h);
        fail_msg("%s is still loaded", name);
    }
}

/* A symbol of a plugin the registry holds open (the extra reference taken
 * here is dropped again; the registry's keeps the library mapped). */
static void *plugin_sym(const char *name, const char *sym)
{
    char path[512];
    void *h = dlopen(plugin_path(path, sizeof(path), name), RTLD_NOW | RTLD_NOLOAD);
    void *p;
    assert_non_null(h);
    p = dlsym(h, sym);
    dlclose(h);
    assert_non_null(p);
    return p;
}

/* Number of metric families in the registry, from the rendered text. */
static int n_families(const host_metrics *m)
{
    char *text = NULL;
    int n = 0;
    assert_int_equal(host_metrics_render(m, &text, NULL), SMP_OK);
    for (const char *p = text; (p = strstr(p, "# TYPE ")) != NULL; p++) n++;
    free(text);
    return n;
}

/* Nothing but the host's own vetoes family is registered. */
static void assert_registry_empty(fixture *fx)
{
    assert_int_equal(host_plugins_count(fx->reg), 0);
    assert_int_equal(host_plugins_n_oplog_types(fx->reg), 0);
    assert_int_equal(host_plugins_n_sections(fx->reg), 0);
    assert_int_equal(host_plugins_n_ticks(fx->reg), 0);
    assert_false(host_plugins_has_guard(fx->reg));
    assert_int_equal(host_plugins_n_key_spaces(fx->reg), 0);
    for (unsigned id = 0; id < 100; id++) assert_null(host_plugins_rpc_service(fx->reg, (uint16_t)id));
    assert_int_equal(n_families(fx->metrics), 1);
    assert_non_null(host_metrics_find(fx->metrics, "host_guard_vetoes_total"));
}

/* Load `name`, expect the refusal rc and exact message, an untouched
 * registry and a closed library. */
static void expect_refusal(fixture *fx, const char *name, int rc, const char *msg)
{
    assert_int_equal(load(fx, name), rc);
    assert_string_equal(fx->err, msg);
    assert_registry_empty(fx);
    assert_closed(name);
}

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

/* -- The rest of the host API table ------------------------------------------------------- */

static void on_removed(void *arg, int status)
{
    assert_int_equal(status, SMP_OK);
    (*(int *)arg)++;
}

static void test_host_api_members(void **state)
{
    int removed = 0;
    fixture *fx = *state;
    host_config_node ratio = {.kind = HOST_CFG_SCALAR, .line = 4, .key = "ratio", .scalar = "0.25"};
    host_config_node *items[1] = {&ratio};
    host_config_node block = {.kind = HOST_CFG_MAP, .line = 3, .items = items, .n_items = 1};
    const smp_host_api *(*get_api)(void);
    smp_host *(*get_host)(void);
    const smp_host_api *api;
    smp_host *h;
    smp_config_value v;
    smp_object_info info;
    uint64_t used = 1, cap = 1;
    const uint8_t *data = (const uint8_t *)"x";
    size_t len = 1;

    assert_int_equal(host_plugins_load(fx->reg, entry_for(fx, "good_minimal", &block), fx->err,
                                       sizeof(fx->err)), SMP_OK);
    *(void **)&get_api = plugin_sym("good_minimal", "good_minimal_api");
    *(void **)&get_host = plugin_sym("good_minimal", "good_minimal_host");
    api = get_api();
    h = get_host();

    assert_int_equal(api->struct_size, sizeof(smp_host_api));
    assert_int_equal(api->abi_major, SMP_ABI_MAJOR);
    assert_int_equal(api->abi_minor, SMP_ABI_MINOR);
    assert_int_equal(api->host_caps, SMP_HOST_CAPS_V1);
    assert_true(SMP_HOST_HAS(api, free));

    assert_int_equal(api->config_get(h, SMP_CONFIG_PLUGIN, "ratio", &v), SMP_OK);
    assert_int_equal(v.type, SMP_CONFIG_DOUBLE);
    assert_true(v.d == 0.25);
    assert_int_equal(api->config_get(h, SMP_CONFIG_PLUGIN, "missing", &v), SMP_ENOTFOUND);
    assert_int_equal(api->config_get(h, SMP_CONFIG_CLUSTER, "default_weight_mixed_hot_ratio", &v), SMP_OK);
    assert_true(v.d == 0.5);
    assert_int_equal(api->config_get(h, SMP_CONFIG_CLUSTER, "ratio", &v), SMP_ENOTFOUND);

    fx->cfg.ha_enabled = 1;
    assert_int_equal(api->ha_mode(h), 1);
    fx->cfg.ha_enabled = 0;
    assert_int_equal(api->ha_mode(h), 0);
    assert_int_equal(api->is_leader(h), 1);
    fx->rec.leader = 0;
    assert_int_equal(api->is_leader(h), 0);
    assert_true(api->now_ms(h) > 0);
    assert_true(api->wall_ms(h) > UINT64_C(1500000000000));

    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    assert_int_equal(api->object_get(h, "k", &info), SMP_OK);
    assert_int_equal(info.size, 42);
    assert_int_equal(api->object_get(h, "nope", &info), SMP_ENOTFOUND);
    assert_int_equal(fx->rec.object_gets, 2);
    /* ABI 1.5: the backend's objects version, as it moves (0: it cannot
     * tell, ask object_get every time). */
    assert_true(SMP_HOST_HAS(api, objects_version));
    assert_int_equal(api->objects_version(h), 0);
    fx->rec.objects_version = 5;
    assert_int_equal(api->objects_version(h), 5);
    /* ABI 1.6: the end of a key's read leases, as the backend says (a NULL
     * key is asked nothing and answered 0: no lease). */
    assert_true(SMP_HOST_HAS(api, object_read_lease_end));
    fx->rec.lease_end = 12345;
    assert_int_equal(api->object_read_lease_end(h, "k"), 12345);
    assert_string_equal(fx->rec.lease_key, "k");
    assert_int_equal(api->object_read_lease_end(h, NULL), 0);
    /* ABI 1.7: the backend's objects loss version, on its own (0 until it
     * says otherwise). */
    assert_true(SMP_HOST_HAS(api, objects_loss_version));
    assert_int_equal(api->objects_loss_version(h), 0);
    fx->rec.objects_loss_version = 3;
    assert_int_equal(api->objects_loss_version(h), 3);
    assert_int_equal(api->objects_version(h), 5);
    /* ABI 1.8: a call held for a key's node is the backend's to hold; a
     * NULL call or key, or a NULL body with a length, is not held and never
     * reaches it. */
    assert_true(SMP_HOST_HAS(api, rpc_wait_for_nodes));
    smp_rpc_call *held = (smp_rpc_call *)&fx->rec; /* opaque to the host: never read */
    static const uint8_t req_body[3] = {1, 2, 3};
    assert_int_equal(api->rpc_wait_for_nodes(h, held, "k", req_body, 3), 1);
    assert_int_equal(fx->rec.waits, 1);
    assert_string_equal(fx->rec.wait_key, "k");
    assert_int_equal(fx->rec.wait_len, 3);
    assert_int_equal(api->rpc_wait_for_nodes(h, NULL, "k", req_body, 3), 0);
    assert_int_equal(api->rpc_wait_for_nodes(h, held, NULL, req_body, 3), 0);
    assert_int_equal(api->rpc_wait_for_nodes(h, held, "k", NULL, 3), 0);
    assert_int_equal(fx->rec.waits, 1);
    assert_int_equal(api->remove_object(h, "k", NULL, NULL), SMP_OK);
    assert_int_equal(fx->rec.removes, 1);
    assert_null(fx->rec.done_cb); /* no callback asked for: none is owed */
    assert_int_equal(api->remove_object(h, "k", on_removed, &removed), SMP_OK);
    assert_non_null(fx->rec.done_cb); /* the host's own record of what it owes */
    assert_int_equal(removed, 0);
    fx->rec.done_cb(fx->rec.done_arg, SMP_OK);
    assert_int_equal(removed, 1);
    assert_int_equal(api->ensure_cold(h, "k", NULL, NULL), SMP_ENOTSUP);
    assert_int_equal(api->group_list(h, "g", NULL, 10, visit_none, NULL),
                     SMP_ENOTSUP);
    assert_int_equal(api->group_count(h, "g"), 0);
    api->memory_usage(h, &used, &cap);
    assert_int_equal(used, 10);
    assert_int_equal(cap, 100);
    assert_int_equal(api->writer_write(NULL, "abc", 3), SMP_ENOTSUP);
    api->reader_data(NULL, &data, &len);
    assert_null(data);
    assert_int_equal(len, 0);
    assert_int_equal(api->rpc_reply(NULL, SMP_OK, NULL, 0), SMP_ENOTSUP);

    /* A backend set later reaches the loaded plugin's table. */
    fx->be.writer_write = rec_writer_write;
    fx->be.memory_usage = NULL;
    host_plugins_set_backend(fx->reg, &fx->be);
    assert_int_equal(api->writer_write(NULL, "abc", 3), 3);
    api->memory_usage(h, &used, &cap);
    assert_int_equal(used, 0);
    assert_int_equal(cap, 0);

    {
        void *p = api->alloc(16);
        assert_non_null(p);
        api->free(p);
    }
    api->log(h, SMP_LOG_INFO, "hello %d", 42);
}

/* -- Guards and events ----------------------------------------------------------------------- */

static double vetoes(fixture *fx, const char *reason)
{
    const char *values[1] = {reason};
    return host_metric_value(host_metrics_find(fx->metrics, "host_guard_vetoes_total"), values);
}

static void test_guard_vetoes_counted_per_reason(void **state)
{
    fixture *fx = *state;
    smp_guard_request req = {sizeof(req), SMP_GUARD_BATCH_EVICT, "a", "g", 0, SMP_DATA_KV, SMP_REPLICA_MEMORY};
    int (*guard_calls)(void);
    char *text = NULL;

    assert_int_equal(host_plugins_guard_check(fx->reg, &req), SMP_GUARD_ALLOW); /* no guard */
    assert_int_equal(load(fx, "good_minimal"), SMP_OK);
    assert_int_equal(load(fx, "good_other"), SMP_OK);
    *(void **)&guard_calls = plugin_sym("good_minimal", "good_minimal_guard_calls");

    assert_int_equal(host_plugins_guard_check(fx->reg, &req), SMP_GUARD_ALLOW);
    req.group_managed = 1;
    assert_int_equal(host_plugins_guard_check(fx->reg, &req), SMP_GUARD_VETO);
    req.reason = SMP_GUARD_REMOVE_KEY;
    assert_int_equal(host_plugins_guard_check(fx->reg, &req), SMP_GUARD_VETO);
    /* An error from a guard is a veto. */
    req.group_managed = 0;
    req.key = "error/x";
    req.reason = SMP_GUARD_COLD_EVICT;
    assert_int_equal(host_plugins_guard_check(fx->reg, &req), SMP_GUARD_VETO);
    /* The second plugin's guard alone vetoes; the first is still asked. */
    req.key = "other/x";
    req.reason = SMP_GUARD_UPSERT_INTO_GROUP;
    assert_int_equal(host_plugins_guard_check(fx->reg, &req), SMP_GUARD_VETO);
    assert_int_equal(guard_calls(), 5);

    assert_true(vetoes(fx, "batch_evict") == 1);
    assert_true(vetoes(fx, "remove_key") == 1);
    assert_true(vetoes(fx, "cold_evict") == 1);
    assert_true(vetoes(fx, "upsert_into_group") == 1);
    assert_true(vetoes(fx, "quota_evict") == 0);
    assert_int_equal(host_metrics_render(fx->metrics, &text, NULL), SMP_OK);
    assert_non_null(strstr(text, "# TYPE host_guard_vetoes_total counter\n"
                                 "host_guard_vetoes_total{reason=\"batch_evict\"} 1\n"
                                 "host_guard_vetoes_total{reason=\"quota_evict\"} 0\n"
                                 "host_guard_vetoes_total{reason=\"remove_key\"} 1\n"
                                 "host_guard_vetoes_total{reason=\"remove_all\"} 0\n"
                                 "host_guard_vetoes_total{reason=\"remove_pattern\"} 0\n"
                                 "host_guard_vetoes_total{reason=\"stale_put_cleanup\"} 0\n"
                                 "host_guard_vetoes_total{reason=\"cold_evict\"} 1\n"
                                 "host_guard_vetoes_total{reason=\"put_into_group\"} 0\n"
                                 "host_guard_vetoes_total{reason=\"upsert_into_group\"} 1\n"));
    free(text);
    assert_string_equal(host_guard_reason_name((smp_guard_reason)0), "unknown");
    assert_string_equal(host_guard_reason_name(SMP_GUARD_STALE_PUT_CLEANUP), "stale_put_cleanup");
}

/* A guard decides only for the groups its plugin owns: asked with an owner,
 * only that plugin's guard answers (another plugin's veto or allow is not
 * heard); an owner that is not loaded asks nobody. is_active names loaded
 * plugins by descriptor name. */
static void test_guard_scoped_to_owner(void **state)
{
    fixture *fx = *state;
    smp_guard_request req = {sizeof(req), SMP_GUARD_REMOVE_KEY, "other/x", "g", 1, SMP_DATA_KV, SMP_REPLICA_MEMORY};
    int (*guard_calls)(void);
    int asked = -1;

    assert_false(host_plugins_is_active(fx->reg, "good_minimal"));
    assert_false(host_plugins_is_active(NULL, "good_minimal"));
    assert_int_equal(load(fx, "good_minimal"), SMP_OK);
    assert_int_equal(load(fx, "good_other"), SMP_OK);
    *(void **)&guard_calls = plugin_sym("good_minimal", "good_minimal_guard_calls");
    assert_true(host_plugins_is_active(fx->reg, "good_minimal"));
    assert_true(host_plugins_is_active(fx->reg, "good_other"));
    assert_false(host_plugins_is_active(fx->reg, "weight_management"));
    assert_false(host_plugins_is_active(fx->reg, NULL));

    /* good_minimal vetoes managed members, good_other vetoes other/ keys. */
    assert_int_equal(host_plugins_guard_check_owner(fx->reg, "good_minimal", &req, &asked),
                     SMP_GUARD_VETO);
    assert_int_equal(asked, 1);
    assert_int_equal(guard_calls(), 1);
    req.group_managed = 0; /* good_minimal now allows; good_other's veto is not asked */
    assert_int_equal(host_plugins_guard_check_owner(fx->reg, "good_minimal", &req, &asked),
                     SMP_GUARD_ALLOW);
    assert_int_equal(asked, 1);
    assert_int_equal(host_plugins_guard_check_owner(fx->reg, "good_other", &req, &asked),
                     SMP_GUARD_VETO);
    assert_int_equal(asked, 1);
    assert_int_equal(guard_calls(), 2);
    assert_int_equal(host_plugins_guard_check_owner(fx->reg, "weight_management", &req, &asked),
                     SMP_GUARD_ALLOW);
    assert_int_equal(asked, 0);
    assert_int_equal(host_plugins_guard_check_owner(fx->reg, NULL, &req, &asked), SMP_GUARD_VETO);
    assert_int_equal(asked, 2);
    assert_int_equal(guard_calls(), 3);
}

static void test_events_routed_by_mask(void **state)
{
    fixture *fx = *state;
    int (*count)(int);
    smp_event ev = {0};
    const char *label[1] = {"object_completed"};

    assert_int_equal(load(fx, "good_minimal"), SMP_OK);
    *(void **)&count = plugin_sym("good_minimal", "good_minimal_event_count");
    ev.struct_size = sizeof(ev);
    ev.type = SMP_EVENT_OBJECT_COMPLETED;
    host_plugins_emit(fx->reg, &ev);
    host_plugins_emit(fx->reg, &ev);
    ev.type = SMP_EVENT_NODE_UP;
    host_plugins_emit(fx->reg, &ev);
    ev.type = SMP_EVENT_NODE_DOWN;
    host_plugins_emit(fx->reg, &ev);
    ev.type = (smp_event_type)40; /* out of mask range: ignored */
    host_plugins_emit(fx->reg, &ev);
    assert_int_equal(count(SMP_EVENT_OBJECT_COMPLETED), 2);
    assert_int_equal(count(SMP_EVENT_NODE_UP), 0);
    assert_int_equal(count(SMP_EVENT_NODE_DOWN), 1);
    assert_int_equal(count(SMP_EVENT_ROLE_CHANGE), 0);
    /* The plugin's metric counted them through the API. */
    assert_true(host_metric_value(host_metrics_find(fx->metrics, "good_minimal_events_total"), label) == 2);
}

/* -- reload, disable, enable (plugin_reload.c) ------------------------------------------ */

typedef struct change_seen {
    int calls;
    host_plugin_change_result res;
} change_seen;

static void on_change(void *arg, const host_plugin_change_result *res)
{
    change_seen *c = arg;
    c->calls++;
    c->res = *res;
}

/* A plugin without the ABI 1.1 hooks cannot be reloaded, but is disabled
 * (after a quiesce that parks its calls and keeps its guard) and enabled:
 * disabled, its services answer a clear refusal and its guard is not asked;
 * every refusal names the cause and changes nothing. */
static void test_disable_enable_and_refusals(void **state)
{
    fixture *fx = *state;
    change_seen seen = {0};
    smp_guard_request req = {sizeof(req), SMP_GUARD_REMOVE_KEY, "a", "g", 1, SMP_DATA_WEIGHT, SMP_REPLICA_MEMORY};
    int (*guard_calls)(void);
    smp_rpc_call *call = (smp_rpc_call *)&seen; /* never dereferenced by the host */

    assert_int_equal(load(fx, "good_minimal"), SMP_OK);
    *(void **)&guard_calls = plugin_sym("good_minimal", "good_minimal_guard_calls");
    host_plugin *p = host_plugins_at(fx->reg, 0);
    assert_false(host_plugin_can_reload(p));
    assert_int_equal(host_plugins_reload(fx->reg, "good_minimal", NULL, on_change, &seen, fx->err,
                                         sizeof(fx->err)), SMP_ENOTSUP);
    char why[128];
    snprintf(why, sizeof(why), "plugin good_minimal (ABI 1.%d) cannot hand its state over",
             SMP_ABI_MINOR);
    assert_non_null(strstr(fx->err, why));
    assert_int_equal(host_plugins_disable(fx->reg, "nope", on_change, &seen, fx->err, sizeof(fx->err)),
                     SMP_ENOTFOUND);
    assert_string_equal(fx->err, "no plugin named 'nope' is loaded (loaded: good_minimal)");
    assert_int_equal(host_plugins_enable(fx->reg, "good_minimal", fx->err, sizeof(fx->err)), SMP_ESTATE);
    assert_string_equal(fx->err, "plugin good_minimal is not disabled (it is active)");
    assert_false(host_plugins_changing(fx->reg));

    /* Disable: quiescing first -- calls parked, the guard still decides. */
    assert_int_equal(host_plugins_disable(fx->reg, "good_minimal", on_change, &seen, fx->err,
                                          sizeof(fx->err)), SMP_OK);
    assert_true(host_plugins_changing(fx->reg));
    assert_int_equal(host_plugin_run_state(p), HOST_PLUGIN_QUIESCING);
    assert_true(host_plugins_is_active(fx->reg, "good_minimal"));
    assert_int_equal(host_plugins_disable(fx->reg, "good_minimal", on_change, &seen, fx->err,
                                          sizeof(fx->err)), SMP_EBUSY);
    assert_int_equal(host_plugins_dispatch(fx->reg, 16, 1, call, (const uint8_t *)"x", 1, fx->err,
                                           sizeof(fx->err)), SMP_OK); /* parked */
    assert_int_equal(host_plugins_guard_check(fx->reg, &req), SMP_GUARD_VETO);
    assert_int_equal(guard_calls(), 1);
    assert_int_equal(seen.calls, 0);
    host_plugins_poll(fx->reg);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.res.status, SMP_OK);
    assert_string_equal(seen.res.name, "good_minimal");
    assert_false(host_plugins_changing(fx->reg));

    /* Disabled: refused clearly, not asked, not active. */
    assert_int_equal(host_plugin_run_state(p), HOST_PLUGIN_DISABLED);
    assert_false(host_plugins_is_active(fx->reg, "good_minimal"));
    assert_false(host_plugins_has_guard(fx->reg));
    assert_int_equal(host_plugins_guard_check(fx->reg, &req), SMP_GUARD_ALLOW);
    assert_int_equal(guard_calls(), 1);
    assert_int_equal(host_plugins_dispatch(fx->reg, 16, 1, call, NULL, 0, fx->err, sizeof(fx->err)),
                     SMP_ENOTSUP);
    assert_string_equal(fx->err, "plugin good_minimal is disabled: service 16 (good_service) is "
                                 "refused until `weightctl plugin enable good_minimal`");
    host_tick_reg *t = host_plugins_tick_at(fx->reg, 0);
    smp_tick_budget b = {sizeof(b), 1, 1, 0};
    assert_int_equal(host_plugins_run_tick(fx->reg, t, &b), SMP_TICK_DONE);
    assert_int_equal(host_plugins_disable(fx->reg, "good_minimal", on_change, &seen, fx->err,
                                          sizeof(fx->err)), SMP_ESTATE);
    assert_string_equal(fx->err, "plugin good_minimal is disabled: it is already");
    assert_int_equal(host_plugins_reload(fx->reg, "good_minimal", NULL, on_change, &seen, fx->err,
                                         sizeof(fx->err)), SMP_ESTATE);
    assert_non_null(strstr(fx->err, "enable it first"));

    /* Enabled: active again, the guard decides, the service is routed. */
    assert_int_equal(host_plugins_enable(fx->reg, "good_minimal", fx->err, sizeof(fx->err)), SMP_OK);
    assert_true(host_plugins_is_active(fx->reg, "good_minimal"));
    assert_int_equal(host_plugins_guard_check(fx->reg, &req), SMP_GUARD_VETO);
    assert_int_equal(guard_calls(), 2);
    assert_int_equal(host_plugins_dispatch(fx->reg, 16, 1, call, NULL, 0, fx->err, sizeof(fx->err)),
                     SMP_OK);
    assert_int_equal(host_plugins_dispatch(fx->reg, 16, 9, call, NULL, 0, fx->err, sizeof(fx->err)),
                     SMP_ENOTFOUND);
    assert_string_equal(fx->err, "service 16 (good_service) has no method 9");
    assert_int_equal(seen.calls, 1);
}

/* reload_probe's state (tests/plugins/reload_probe.c). */
typedef struct probe_state {
    uint64_t value;
    int resumes;
    int last_reason;
} probe_state;

static void reload_and_poll(fixture *fx, change_seen *seen)
{
    int before = seen->calls;
    assert_int_equal(host_plugins_reload(fx->reg, "reload_probe", NULL, on_change, seen, fx->err,
                                         sizeof(fx->err)), SMP_OK);
    assert_true(host_plugins_changing(fx->reg));
    host_plugins_poll(fx->reg);
    assert_int_equal(seen->calls, before + 1);
    assert_false(host_plugins_changing(fx->reg));
}

/* A reloadable plugin: every refusal on the way (negotiation, quiesce,
 * import, self-check) leaves the old instance serving and resumed with
 * ROLLBACK, its registrations in place; a busy quiesce holds the change
 * (calls parked) until it says idle; then the new instance takes the state,
 * the registrations and the metric family over. */
static void test_reload_steps_and_rollbacks(void **state)
{
    fixture *fx = *state;
    change_seen seen = {0};
    host_config_node fail = {.kind = HOST_CFG_SCALAR, .line = 3, .key = "fail", .scalar = "none"};
    host_config_node *items[1] = {&fail};
    host_config_node block = {.kind = HOST_CFG_MAP, .line = 2, .items = items, .n_items = 1};
    smp_rpc_call *call = (smp_rpc_call *)&seen; /* never dereferenced by the host */

    assert_int_equal(host_plugins_load(fx->reg, entry_for(fx, "reload_probe", &block), fx->err,
                                       sizeof(fx->err)), SMP_OK);
    host_plugin *old = host_plugins_at(fx->reg, 0);
    probe_state *st = host_plugin_state(old);
    assert_true(host_plugin_can_reload(old));
    st->value = 42;
    host_metric *family = host_metrics_find(fx->metrics, "reload_probe_total");
    assert_non_null(family);

    fail.scalar = "type";
    assert_int_equal(host_plugins_reload(fx->reg, "reload_probe", NULL, on_change, &seen, fx->err,
                                         sizeof(fx->err)), SMP_ENOTSUP);
    assert_string_equal(fx->err, "reload_probe.so: does not replay OpLog type 30 (PROBE_RECORD), "
                                 "which the serving instance replays");
    assert_false(host_plugins_changing(fx->reg));
    assert_ptr_equal(host_plugins_oplog_type(fx->reg, 30)->owner, old);

    fail.scalar = "quiesce";
    reload_and_poll(fx, &seen);
    assert_int_equal(seen.res.status, SMP_EIO);
    assert_string_equal(seen.res.reason, "reload_probe.so: quiesce failed: SMP_EIO");
    assert_int_equal(st->resumes, 1);
    assert_int_equal(st->last_reason, SMP_RESUME_ROLLBACK);

    fail.scalar = "import";
    reload_and_poll(fx, &seen);
    assert_int_equal(seen.res.status, SMP_EPROTO);
    assert_string_equal(seen.res.reason, "reload_probe.so: the new instance refused the state "
                                         "handoff: probe refuses the handoff of 8 bytes (SMP_EPROTO)");
    fail.scalar = "self_check";
    reload_and_poll(fx, &seen);
    assert_int_equal(seen.res.status, SMP_EINVAL);
    assert_string_equal(seen.res.reason, "reload_probe.so: self-check of the new instance failed: "
                                         "probe self-check says no (value 42) (SMP_EINVAL)");
    assert_int_equal(st->resumes, 3);
    assert_ptr_equal(host_plugins_at(fx->reg, 0), old);
    assert_int_equal(host_plugin_reloads(old), 0);
    assert_ptr_equal(host_plugins_oplog_type(fx->reg, 30)->owner, old);
    assert_int_equal(host_plugins_n_oplog_types(fx->reg), 1);
    assert_ptr_equal(host_metrics_find(fx->metrics, "reload_probe_total"), family);
    host_key_space ks;
    assert_int_equal(host_plugins_n_key_spaces(fx->reg), 1); /* the new instances' went with them */
    assert_true(host_plugins_key_space_of(fx->reg, "probe/x", &ks));
    assert_string_equal(ks.plugin, "reload_probe");

    /* Busy: the change waits, calls are parked; then it goes through. */
    fail.scalar = "busy";
    assert_int_equal(host_plugins_reload(fx->reg, "reload_probe", NULL, on_change, &seen, fx->err,
                                         sizeof(fx->err)), SMP_OK);
    assert_int_equal(host_plugins_dispatch(fx->reg, 41, 1, call, NULL, 0, fx->err, sizeof(fx->err)),
                     SMP_OK);
    host_plugins_poll(fx->reg);
    host_plugins_poll(fx->reg);
    assert_true(host_plugins_changing(fx->reg));
    assert_int_equal(seen.calls, 3);
    fail.scalar = "none";
    host_plugins_poll(fx->reg);
    assert_int_equal(seen.calls, 4);
    assert_int_equal(seen.res.status, SMP_OK);
    assert_string_equal(seen.res.old_version, "2.0");
    assert_string_equal(seen.res.new_version, "2.0");

    host_plugin *now = host_plugins_at(fx->reg, 0);
    assert_ptr_not_equal(now, old); /* old is gone (finalised, closed) */
    probe_state *nst = host_plugin_state(now);
    assert_int_equal(nst->value, 42);
    assert_int_equal(nst->resumes, 1);
    assert_int_equal(nst->last_reason, SMP_RESUME_HANDOFF);
    assert_int_equal(host_plugin_reloads(now), 1);
    assert_int_equal(host_plugins_count(fx->reg), 1);
    assert_int_equal(host_plugins_n_oplog_types(fx->reg), 1);
    assert_ptr_equal(host_plugins_oplog_type(fx->reg, 30)->owner, now);
    assert_ptr_equal(host_plugins_rpc_service(fx->reg, 41)->owner, now);
    assert_ptr_equal(host_plugins_section(fx->reg, "probe_section")->owner, now);
    assert_ptr_equal(host_metrics_find(fx->metrics, "reload_probe_total"), family);
    /* The new instance claimed "probe/" while the old one held it: its own
     * claim now, the only one. */
    assert_int_equal(host_plugins_n_key_spaces(fx->reg), 1);
    assert_true(host_plugins_key_space_of(fx->reg, "probe/x", &ks));
    assert_string_equal(ks.prefix, "probe/");
    assert_string_equal(ks.plugin, "reload_probe");
}

/* A change still in progress when the registry goes (shutdown) ends as
 * SMP_ECANCELED: done is called once, the plugin is unloaded normally. */
static void test_change_in_progress_at_destroy_is_canceled(void **state)
{
    fixture *fx = *state;
    change_seen seen = {0};
    assert_int_equal(load(fx, "good_minimal"), SMP_OK);
    assert_int_equal(host_plugins_disable(fx->reg, "good_minimal", on_change, &seen, fx->err,
                                          sizeof(fx->err)), SMP_OK);
    host_plugins_destroy(fx->reg);
    fx->reg = NULL;
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.res.status, SMP_ECANCELED);
    assert_string_equal(seen.res.reason, "the master is shutting down");
    assert_closed("good_minimal");
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

/* A disabled plugin keeps its key space, marked disabled; enabled again,
 * the mark goes. */
static void test_key_space_of_a_disabled_plugin(void **state)
{
    fixture *fx = *state;
    change_seen seen = {0};
    host_key_space ks;
    assert_int_equal(load(fx, "good_other"), SMP_OK);
    assert_int_equal(host_plugins_disable(fx->reg, "good_other", on_change, &seen, fx->err,
                                          sizeof(fx->err)), SMP_OK);
    host_plugins_poll(fx->reg);
    assert_int_equal(seen.res.status, SMP_OK);
    assert_true(host_plugins_key_space_of(fx->reg, "other/x", &ks));
    assert_string_equal(ks.plugin, "good_other");
    assert_true(ks.disabled);
    assert_true(host_plugins_key_space_at(fx->reg, 0, &ks));
    assert_true(ks.disabled);
    assert_int_equal(host_plugins_enable(fx->reg, "good_other", fx->err, sizeof(fx->err)), SMP_OK);
    assert_true(host_plugins_key_space_of(fx->reg, "other/x", &ks));
    assert_false(ks.disabled);
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
        cmocka_unit_test_setup_teardown(test_disable_enable_and_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_change_in_progress_at_destroy_is_canceled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload_steps_and_rollbacks, setup, teardown),
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
        cmocka_unit_test_setup_teardown(test_gate_that_is_not_a_boolean_flag_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gate_from_plugin_block, setup, teardown),
        cmocka_unit_test_setup_teardown(test_good_plugin_registers_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_after_good_plugin_keeps_it, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_plugin_twice_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register_after_init_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_good_plugin_register_late_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oplog_append_gating, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_api_members, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guard_scoped_to_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guard_vetoes_counted_per_reason, setup, teardown),
        cmocka_unit_test_setup_teardown(test_events_routed_by_mask, setup, teardown),
        cmocka_unit_test_setup_teardown(test_describe_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_all_skips_disabled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_all_unloads_on_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_all_names_the_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_registration_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_space_claims, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_space_of_a_disabled_plugin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weight_mgmt_claims_its_key_space_when_the_host_can,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
