/* wm_scripted_host.h -- the scripted host API that test_wm_management.c and
 * test_wm_integrity.c run the weight plugin's management RPCs on.
 *
 * The effects the plugin asks of the host wait in a queue until the test
 * completes the oldest one with the status it chooses (deliver): OpLog
 * appends, group-flag changes, and object removals when the test asks for
 * them to be queued too (wmh_setup). So a test sees the order of effects,
 * and that nothing is answered or visible before its record is durable.
 * The host's objects are a table the test fills (H.objs); the wall clock is
 * the test's (H.wall); the plugin keys import_ttl_ms and
 * record_retention_ms are H's when set (>= 0). Replica tasks are accepted
 * and never complete (test_wm_lifecycle.c runs them).
 *
 * Header-only (static functions) like wm_test_records.h: each test program
 * has its own host, plugin (P) and API table. */
#ifndef WM_SCRIPTED_HOST_H
#define WM_SCRIPTED_HOST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weight_rpc.pb-c.h"
#include "wm_plugin.h"
#include "wm_test_records.h"

/* One effect waiting for the test to deliver it. */
typedef struct pending_cb {
    int is_append;
    int is_remove;   /* remove_object: the object goes at delivery */
    uint16_t type;   /* the record's (appends) */
    uint16_t encver;
    char key[1100];  /* the object's (removals) */
    uint8_t *payload;
    size_t len;
    smp_durable_cb dcb;
    smp_done_cb gcb;
    void *arg;
} pending_cb;

/* An object of the host, as object_get and group_list report it. */
typedef struct fake_obj {
    char key[1100];
    char group[1100];
    uint64_t size;
    smp_data_type type;
    uint8_t sha[32];
    int no_memory; /* 0: a readable memory replica */
    int cold;      /* a readable cold replica */
} fake_obj;

struct smp_rpc_call {
    int answered;
    int status;
    char body[4096];
    size_t len;
};

#define WMH_QUEUE 64 /* effects waiting at once */
#define WMH_LOG 16   /* records kept by H.logging */

static struct {
    pending_cb q[WMH_QUEUE];
    size_t nq;
    int64_t import_ttl_ms; /* plugin keys; -1: absent */
    int64_t retention_ms;
    int64_t cooldown_ms;   /* cluster weight_migration_cooldown_ms; -1: absent */
    int append_rc;         /* returned by oplog_append when non-zero */
    int logging;           /* keep the records made durable in log[] */
    struct {
        uint16_t type;
        uint8_t *payload;
        size_t len;
    } log[WMH_LOG];
    size_t nlog;
    fake_obj objs[700];
    size_t nobjs;
    const smp_rpc_service *svc;
    uint64_t wall;
    smp_metric *dummy;
} H;

static smp_host_api API;
static wm_plugin P;

/* A new entry at the end of the queue, zeroed. */
static pending_cb *wmh_queue(void)
{
    assert_true(H.nq < WMH_QUEUE);
    pending_cb *p = &H.q[H.nq++];
    memset(p, 0, sizeof(*p));
    return p;
}

static int f_rpc_reply(smp_rpc_call *call, int status, const uint8_t *body, size_t len)
{
    assert_int_equal(call->answered, 0); /* exactly once */
    call->answered = 1;
    call->status = status;
    if (len > sizeof(call->body)) len = sizeof(call->body);
    if (len) memcpy(call->body, body, len);
    call->len = len;
    return SMP_OK;
}

static int f_append(smp_host *h, uint16_t type, uint16_t encver, const void *payload, size_t len,
                    smp_durable_cb cb, void *arg)
{
    (void)h;
    if (H.append_rc) return H.append_rc;
    pending_cb *p = wmh_queue();
    p->is_append = 1;
    p->encver = encver;
    p->type = type;
    p->payload = malloc(len ? len : 1);
    assert_non_null(p->payload);
    memcpy(p->payload, payload, len);
    p->len = len;
    p->dcb = cb;
    p->arg = arg;
    return SMP_OK;
}

static int f_set_managed(smp_host *h, const char *group, int managed, smp_done_cb cb, void *arg)
{
    (void)h, (void)group, (void)managed;
    pending_cb *p = wmh_queue();
    p->gcb = cb;
    p->arg = arg;
    return SMP_OK;
}

/* Complete the oldest queued effect with status; returns its record type
 * (0 for a group flag or a removal). A removal delivered SMP_OK takes the
 * object out of H.objs; an append delivered SMP_OK while H.logging is kept
 * in H.log. */
static inline uint16_t deliver(int status)
{
    assert_true(H.nq > 0);
    pending_cb p = H.q[0];
    memmove(&H.q[0], &H.q[1], (H.nq - 1) * sizeof(H.q[0]));
    H.nq--;
    if (p.is_remove && status == SMP_OK)
        for (size_t i = 0; i < H.nobjs; i++)
            if (strcmp(H.objs[i].key, p.key) == 0) {
                H.objs[i] = H.objs[--H.nobjs];
                break;
            }
    if (p.is_append && status == SMP_OK && H.logging && H.nlog < WMH_LOG) {
        H.log[H.nlog].type = p.type;
        H.log[H.nlog].payload = p.payload;
        H.log[H.nlog].len = p.len;
        H.nlog++;
        p.payload = NULL; /* kept by the log */
    }
    if (p.is_append)
        p.dcb(p.arg, status, 1);
    else
        p.gcb(p.arg, status);
    free(p.payload);
    return p.type;
}

static int f_object_get(smp_host *h, const char *key, smp_object_info *out)
{
    (void)h;
    for (size_t i = 0; i < H.nobjs; i++)
        if (strcmp(H.objs[i].key, key) == 0) {
            out->key = H.objs[i].key;
            out->group = H.objs[i].group;
            out->size = H.objs[i].size;
            out->data_type = H.objs[i].type;
            out->complete = 1;
            out->memory_replicas_readable = H.objs[i].no_memory ? 0 : 1;
            out->cold_replicas_readable = H.objs[i].cold ? 1 : 0;
            memcpy(out->checksum, H.objs[i].sha, 32);
            return SMP_OK;
        }
    return SMP_ENOTFOUND;
}

static int f_group_list(smp_host *h, const char *group, const char *after, size_t max,
                        smp_object_visit_fn fn, void *arg)
{
    (void)h;
    int n = 0;
    for (size_t i = 0; i < H.nobjs && (size_t)n < max; i++) {
        if (strcmp(H.objs[i].group, group) != 0) continue;
        if (after && strcmp(H.objs[i].key, after) <= 0) continue;
        smp_object_info o;
        memset(&o, 0, sizeof(o));
        o.struct_size = sizeof(o);
        f_object_get(NULL, H.objs[i].key, &o);
        n++;
        if (fn(arg, &o)) break;
    }
    return n;
}

static uint64_t f_group_count(smp_host *h, const char *group)
{
    (void)h;
    uint64_t n = 0;
    for (size_t i = 0; i < H.nobjs; i++) n += strcmp(H.objs[i].group, group) == 0;
    return n;
}

static int f_config_get(smp_host *h, smp_config_scope s, const char *k, smp_config_value *out)
{
    (void)h;
    int64_t v = -1;
    if (s == SMP_CONFIG_PLUGIN && strcmp(k, "import_ttl_ms") == 0) v = H.import_ttl_ms;
    if (s == SMP_CONFIG_PLUGIN && strcmp(k, "record_retention_ms") == 0) v = H.retention_ms;
    if (s == SMP_CONFIG_CLUSTER && strcmp(k, "weight_migration_cooldown_ms") == 0) v = H.cooldown_ms;
    if (v < 0) return SMP_ENOTFOUND;
    out->type = SMP_CONFIG_INT;
    out->i = v;
    return SMP_OK;
}

static uint64_t f_wall(smp_host *h)
{
    (void)h;
    return H.wall;
}

static void f_log(smp_host *h, smp_log_level l, const char *fmt, ...)
{
    (void)h, (void)l, (void)fmt;
}

static int f_register_rpc(smp_host *h, const smp_rpc_service *s)
{
    (void)h;
    H.svc = s;
    return SMP_OK;
}

static int f_register_metric(smp_host *h, const smp_metric_desc *d, smp_metric **out)
{
    (void)h, (void)d;
    *out = (smp_metric *)&H.dummy;
    return SMP_OK;
}

static void f_metric_set(smp_metric *m, const char *const *l, double v)
{
    (void)m, (void)l, (void)v;
}

/* A replica task: accepted, never completed. */
static int f_task(smp_host *h, const char *key, smp_done_cb cb, void *arg)
{
    (void)h, (void)key, (void)cb, (void)arg;
    return SMP_OK;
}

/* remove_object when removals are queued: the object goes at delivery. */
static int f_remove(smp_host *h, const char *key, smp_done_cb cb, void *arg)
{
    (void)h;
    pending_cb *p = wmh_queue();
    p->is_remove = 1;
    snprintf(p->key, sizeof(p->key), "%s", key);
    p->gcb = cb;
    p->arg = arg;
    return SMP_OK;
}

/* A cmocka setup's work: an empty host at wall clock 10000 ms with no
 * plugin keys, and P on it with a new store and the management RPCs
 * registered. queue_removes 1: remove_object waits in the queue like an
 * append; 0: it is accepted and never completes. */
static inline void wmh_setup(int queue_removes)
{
    memset(&H, 0, sizeof(H));
    memset(&API, 0, sizeof(API));
    API.struct_size = sizeof(API);
    API.host_caps = SMP_HOST_CAPS_V1;
    API.rpc_reply = f_rpc_reply;
    API.oplog_append = f_append;
    API.group_set_managed = f_set_managed;
    API.object_get = f_object_get;
    API.group_list = f_group_list;
    API.group_count = f_group_count;
    API.config_get = f_config_get;
    API.wall_ms = f_wall;
    API.now_ms = f_wall;
    API.log = f_log;
    API.register_rpc_service = f_register_rpc;
    API.register_metric = f_register_metric;
    API.metric_set = f_metric_set;
    API.ensure_cold = f_task;
    API.ensure_memory = f_task;
    API.release_memory = f_task;
    API.remove_object = queue_removes ? f_remove : f_task;
    H.wall = 10000;
    H.import_ttl_ms = -1;
    H.retention_ms = -1;
    H.cooldown_ms = 0; /* an access promotes at once unless a test sets one */
    memset(&P, 0, sizeof(P));
    P.api = &API;
    assert_int_equal(wm_store_create(&P.store), WM_OK);
    assert_int_equal(wm_mgmt_register(&P), SMP_OK);
    assert_non_null(H.svc);
}

/* A cmocka teardown's work: every effect still queued is cancelled, the
 * kept records freed, and P released with its store. */
static inline void wmh_teardown(void)
{
    while (H.nq > 0) deliver(SMP_ECANCELED);
    for (size_t i = 0; i < H.nlog; i++) free(H.log[i].payload);
    wm_mgmt_release(&P);
    wm_vleases_free(&P);
    wm_store_free(P.store);
}

/* Invoke method m with a packed message; the call is returned for checks. */
static inline smp_rpc_call *invoke(uint32_t m, const ProtobufCMessage *msg, smp_rpc_call *call)
{
    memset(call, 0, sizeof(*call));
    size_t n = msg ? protobuf_c_message_get_packed_size(msg) : 0;
    uint8_t *buf = malloc(n ? n : 1);
    assert_non_null(buf);
    if (msg) protobuf_c_message_pack(msg, buf);
    for (size_t i = 0; i < H.svc->n_methods; i++)
        if (H.svc->methods[i].method_id == m) {
            H.svc->methods[i].handler(&P, call, buf, n);
            free(buf);
            return call;
        }
    free(buf);
    fail_msg("no method %u", m);
    return call;
}

/* IMPORT_BEGIN of w. */
static inline void begin(const wm_identity *w, smp_rpc_call *call)
{
    Wmrpc__ImportBeginRequest req = WMRPC__IMPORT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, w);
    req.identity = &id;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_BEGIN, &req.base, call);
}

#endif
