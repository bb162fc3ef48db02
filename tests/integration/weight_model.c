/* weight_model.c -- see weight_model.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <sys/wait.h>
#include <unistd.h>

#include "weight_check.h"
#include "weight_model.h"

void wx_model_fill(wx_tensor *t, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < sizeof(t[i].data); b++)
            t[i].data[b] = (uint8_t)((b * seed + i * 17 + (b >> 7)) & 0xff);
}

weight_store *wx_open_store(const hx_master *m)
{
    weight_store *s = NULL;
    char err[256];
    int rc = weight_store_open(m->socket, "acme", NULL, &s, err, sizeof err);
    if (rc != 0) fail_msg("weight_store_open: %s", err);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, 4096), 0);
    return s;
}

void wx_put_model(weight_store *s, const weight_identity *id, const wx_tensor *t, size_t n)
{
    weight_writer *w = NULL;
    weight_policy pol = {WEIGHT_RES_HOT, 0.0, WEIGHT_MODE_MANUAL};
    CHECK(s, weight_put_begin(s, id, &pol, &w));
    for (size_t i = 0; i < n; i++)
        CHECK(s, weight_writer_add_tensor(w, t[i].name, "F32", 2, t[i].shape, t[i].data));
    weight_metadata md;
    CHECK(s, weight_writer_commit(w, &md));
    assert_int_equal(md.availability, WEIGHT_READY);
}

#define WX_MAX 512 /* tensors of a model read back */

typedef struct getctx {
    const wx_tensor *t;
    size_t n;
    uint8_t *bufs[WX_MAX];
    uint64_t sizes[WX_MAX];
} getctx;

static int place_cb(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    (void)ctx;
    (void)t;
    out->kind = WEIGHT_PLACE_REPLICATED;
    return 0;
}

static int provide_cb(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                      const uint64_t *shape, uint64_t bytes, void **out)
{
    getctx *g = ctx;
    (void)p;
    (void)shape;
    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->t[i].name, t->name) == 0) {
            g->bufs[i] = calloc(1, bytes ? bytes : 1);
            g->sizes[i] = bytes;
            *out = g->bufs[i];
            return g->bufs[i] ? 0 : WEIGHT_ENOMEM;
        }
    return WEIGHT_EINVALID_ARGUMENT;
}

void wx_get_and_compare_stats(weight_store *s, const weight_identity *id, const wx_tensor *t,
                              size_t n, weight_get_stats *st)
{
    getctx g;
    memset(&g, 0, sizeof(g));
    assert_true(n <= WX_MAX);
    g.t = t;
    g.n = n;
    weight_placement pl = {place_cb, &g};
    weight_bindings bd = {NULL, 0, provide_cb, &g};
    CHECK(s, weight_get(s, id, &pl, &bd, st));
    for (size_t i = 0; i < n; i++) {
        unsigned char want[32], got[32];
        assert_non_null(g.bufs[i]);
        assert_int_equal(g.sizes[i], sizeof(t[i].data));
        hx_sha256(t[i].data, sizeof(t[i].data), want);
        hx_sha256(g.bufs[i], g.sizes[i], got);
        if (memcmp(want, got, 32) != 0) fail_msg("%s: tensor %s differs", id->resource_id, t[i].name);
        free(g.bufs[i]);
    }
}

#define WX_WAIT_MS 30000 /* generous: the machine is shared */

weight_metadata wx_wait_state(weight_store *s, const weight_identity *id, int av, int res)
{
    weight_metadata md;
    for (int i = 0; i * 20 < WX_WAIT_MS; i++) {
        CHECK(s, weight_get_metadata(s, id, &md, NULL));
        if ((int)md.availability == av && (res < 0 || (int)md.residency == res) && md.operation_id == 0)
            return md;
        usleep(20000);
    }
    fail_msg("%s: %s %s operation %llu after %d ms (wanted %s %s)", id->resource_id,
             weight_availability_name((int)md.availability), weight_residency_name((int)md.residency),
             (unsigned long long)md.operation_id, WX_WAIT_MS, weight_availability_name(av),
             res < 0 ? "" : weight_residency_name(res));
    return md;
}

void wx_migrate_and_wait(weight_store *s, const weight_identity *id, weight_residency target)
{
    weight_operation op;
    weight_metadata md = wx_wait_state(s, id, WEIGHT_READY, -1);
    CHECK(s, weight_migrate(s, id, target, 0, md.metadata_generation, &op));
    for (int i = 0; i * 20 < WX_WAIT_MS && op.state == 1; i++) {
        usleep(20000);
        CHECK(s, weight_get_operation(s, op.id, &op));
    }
    assert_int_equal(op.state, 2);
    wx_wait_state(s, id, WEIGHT_READY, (int)target);
}

uint64_t wx_get_and_compare(weight_store *s, const weight_identity *id, const wx_tensor *t, size_t n)
{
    weight_get_stats st;
    wx_get_and_compare_stats(s, id, t, n, &st);
    return st.local_bytes;
}

long long wx_metric(const hx_master *m, const char *series)
{
    char *body = NULL, needle[256];
    long long v = -1;
    assert_int_equal(hx_http_get(m, "/metrics", &body), 200);
    snprintf(needle, sizeof(needle), "\n%s ", series);
    const char *at = strstr(body, needle);
    if (at != NULL) v = (long long)strtod(at + strlen(needle), NULL);
    free(body);
    return v;
}

int wx_weightctl(const hx_master *m, char *out, size_t cap, const char *args)
{
    char cmd[1600];
    snprintf(cmd, sizeof(cmd), "%s/bin/weightctl --master %s %s 2>&1", BUILD_DIR, m->socket, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int wx_start_published(hx_master *m, const char *name, const char *binary, const char *plugin_cfg,
                       const wx_tensor *t, size_t n, weight_store **s, weight_identity *id)
{
    char cfg[2048];
    *s = NULL;
    if (hx_init(m, name, NULL) < 0) return -1;
    m->binary = binary;
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: 8388608\n  poll_ms: 10\n"
             "cluster:\n  default_weight_preferred_residency: hot\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n%s%s",
             m->dir, BUILD_DIR, plugin_cfg ? "    config:\n" : "", plugin_cfg ? plugin_cfg : "");
    if (hx_reconfigure(m, cfg) < 0 || hx_start(m, 20000) < 0 ||
        weight_identity_set(id, NULL, "llm", "x", "v1", 1) != 0) {
        hx_cleanup(m);
        return -1;
    }
    *s = wx_open_store(m);
    wx_put_model(*s, id, t, n);
    return 0;
}

wx_published *wx_published_new(const char *name, const char *binary, const char *plugin_cfg,
                               wx_tensor *t, size_t n, unsigned seed)
{
    wx_published *f = calloc(1, sizeof(*f));
    if (f == NULL) return NULL;
    wx_model_fill(t, n, seed);
    if (wx_start_published(&f->m, name, binary, plugin_cfg, t, n, &f->s, &f->id) < 0) {
        free(f);
        return NULL;
    }
    return f;
}

void wx_published_free(wx_published *f)
{
    if (f == NULL) return;
    weight_store_close(f->s);
    hx_cleanup(&f->m);
    free(f);
}
