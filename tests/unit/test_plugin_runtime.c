/* test_plugin_runtime.c -- a loaded plugin at work, and changed while it runs.
 *
 * What a loaded plugin gets from the host: the members of the host API table
 * (config view, HA and leadership, clocks, the backend's object questions
 * and versions, held calls, removals, a backend set later), guards asked for
 * every request or only for the owner's groups with vetoes counted per
 * reason, and events routed by the plugin's mask. Then the changes of
 * plugin_reload.c: disable and enable (calls parked while quiescing, refused
 * while disabled, the guard not asked, the key space kept but marked), a
 * reload whose every refusal rolls back to the serving instance and whose
 * success hands state, registrations and metric families over, and a change
 * still in progress at shutdown, canceled. */
#include "plugin_loader_fixture.h"

/* -- The recording backend's extra answers ---------------------------------------- */

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_disable_enable_and_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_change_in_progress_at_destroy_is_canceled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload_steps_and_rollbacks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_api_members, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guard_scoped_to_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guard_vetoes_counted_per_reason, setup, teardown),
        cmocka_unit_test_setup_teardown(test_events_routed_by_mask, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_space_of_a_disabled_plugin, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
