/* plugin_loader_fixture.h -- the registry fixture the plugin loader's unit
 * programs share (test_plugin_load, test_plugin_register, test_plugin_runtime).
 *
 * setup gives each test a fresh host_plugins registry over a metrics registry,
 * an empty plugin config block and the master's side played by rec_backend:
 * a backend that records what reaches it (oplog appends, object questions,
 * held calls, removals) and answers as the test sets it. The helpers load a
 * test plugin from TEST_PLUGIN_DIR by name, reach one of its symbols, and
 * check that a refusal left nothing behind: no registration, no metric family
 * but the host's own vetoes, the library closed (dlopen with RTLD_NOLOAD
 * finds nothing). Header-only (static inline functions); the unit test glob
 * picks up test_*.c only. */
#ifndef PLUGIN_LOADER_FIXTURE_H
#define PLUGIN_LOADER_FIXTURE_H

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

static inline int rec_oplog_append(void *ctx, uint16_t type, uint16_t encver, const void *payload,
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

static inline int rec_is_leader(void *ctx)
{
    return ((rec_backend *)ctx)->leader;
}

static inline int rec_object_get(void *ctx, const char *key, smp_object_info *out)
{
    rec_backend *b = ctx;
    b->object_gets++;
    if (strcmp(key, "k") != 0) return SMP_ENOTFOUND;
    out->size = 42;
    return SMP_OK;
}

static inline uint64_t rec_objects_version(void *ctx)
{
    return ((rec_backend *)ctx)->objects_version;
}

static inline uint64_t rec_objects_loss_version(void *ctx)
{
    return ((rec_backend *)ctx)->objects_loss_version;
}

static inline int rec_rpc_wait_for_nodes(void *ctx, smp_rpc_call *call, const char *key,
                                         const uint8_t *body, size_t len)
{
    rec_backend *r = ctx;
    (void)call, (void)body;
    r->waits++;
    snprintf(r->wait_key, sizeof(r->wait_key), "%s", key);
    r->wait_len = len;
    return 1;
}

static inline uint64_t rec_object_read_lease_end(void *ctx, const char *key)
{
    rec_backend *r = ctx;
    snprintf(r->lease_key, sizeof(r->lease_key), "%s", key);
    return r->lease_end;
}

static inline int rec_remove_object(void *ctx, const char *key, smp_done_cb cb, void *arg)
{
    rec_backend *b = ctx;
    (void)key;
    b->removes++;
    b->done_cb = cb;
    b->done_arg = arg;
    return SMP_OK;
}

static inline void rec_memory_usage(void *ctx, uint64_t *used, uint64_t *capacity)
{
    (void)ctx;
    *used = 10;
    *capacity = 100;
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

static inline int setup(void **state)
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

static inline int teardown(void **state)
{
    fixture *fx = *state;
    host_plugins_destroy(fx->reg);
    host_metrics_destroy(fx->metrics);
    free(fx);
    return 0;
}

static inline const char *plugin_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s.so", TEST_PLUGIN_DIR, name);
    return buf;
}

/* A config entry for the plugin `name` (with `block`, or the empty one),
 * kept in the fixture for as long as the registry may use it. */
static inline host_config_plugin *entry_for(fixture *fx, const char *name, host_config_node *block)
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

static inline int load(fixture *fx, const char *name)
{
    return host_plugins_load(fx->reg, entry_for(fx, name, NULL), fx->err, sizeof(fx->err));
}

static inline void assert_closed(const char *name)
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
static inline void *plugin_sym(const char *name, const char *sym)
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
static inline int n_families(const host_metrics *m)
{
    char *text = NULL;
    int n = 0;
    assert_int_equal(host_metrics_render(m, &text, NULL), SMP_OK);
    for (const char *p = text; (p = strstr(p, "# TYPE ")) != NULL; p++) n++;
    free(text);
    return n;
}

/* Nothing but the host's own vetoes family is registered. */
static inline void assert_registry_empty(fixture *fx)
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
static inline void expect_refusal(fixture *fx, const char *name, int rc, const char *msg)
{
    assert_int_equal(load(fx, name), rc);
    assert_string_equal(fx->err, msg);
    assert_registry_empty(fx);
    assert_closed(name);
}

#endif /* PLUGIN_LOADER_FIXTURE_H */
