/* objects_probe.c -- a test plugin that calls, while its own snapshot
 * section loads, every member of the host API table that reads or changes
 * objects.
 *
 * The host loads its objects section on a thread of its own while plugins
 * load theirs (master_recovery.c); a plugin that reaches the objects
 * meanwhile must see every object of the snapshot, as it did when the
 * objects loaded first. The probe classifies each member of smp_host_api by
 * its offset (members[] below): one that touches objects has a call here,
 * one that does not says why. Its section load first walks the table the
 * host handed it, up to the host's struct_size, and names every offset it
 * has no entry for ("uncovered=<offset>,..."): a member added to the ABI
 * fails the test until it is classified here (and called, if it touches
 * objects).
 *
 * Then, before anything else, it calls the member its config block names in
 * `first` (any member that touches objects; default none), then every one
 * that touches objects in table order, on the key named by `key` (default
 * "probe/member/0299") and the group named by `group` (default "probe"), and
 * keeps each answer ("object_get=OK", "ensure_cold=SMP_EAGAIN", ...): the
 * writes answer from what they find (SMP_ENOTFOUND for a key that is absent)
 * and change nothing (the OpLog is not replayed yet: an append would answer
 * SMP_ESTATE). Last, the whole group: its member count, every member by
 * group_list in pages of 64, each listed key again by object_get, and the
 * memory in use. It keeps what it saw as text:
 *   "uncovered=none first=<name> <name>=<answer>... count=C listed=L found=F
 *    used=U"
 * which RPC service 43 method 1 (`seen`) replies with ("" before any load);
 * method 2 (`members`) replies with the names of the members that touch
 * objects, space-separated, in table order.
 *
 * With `fail_load: true` in its block, the load asks the same and then
 * refuses the section with SMP_EIO: how a test makes the plugins' side of
 * the section load fail while the objects load beside it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_plugin.h"

#define PROBE_SERVICE 43
#define PROBE_SEEN 1
#define PROBE_MEMBERS 2
#define PROBE_PAGE 64

typedef struct probe {
    smp_host *host;
    const smp_host_api *api;
    char group[256];
    char key[1024];
    char first[64];
    int fail_load;
    char seen[2048];
} probe;

typedef struct page {
    probe *p;
    char last[1024];    /* the last key visited ("" none) */
    uint64_t found;     /* listed keys object_get found again */
    int bad;            /* a key too long to keep, or not found */
} page;

/* -- the members that touch objects ------------------------------------------------ */

static void done(void *arg, int status)
{
    (void)arg;
    (void)status; /* a task that went ahead answers later: nothing to keep */
}

static const char *answer(int rc, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", rc == SMP_OK ? "OK" : smp_strerror(rc));
    return buf;
}

static int count_visit(void *arg, const smp_object_info *obj)
{
    (void)obj;
    ++*(uint64_t *)arg;
    return 0;
}

static void ask_object_get(probe *p, char *out, size_t cap)
{
    smp_object_info info;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    answer(p->api->object_get(p->host, p->key, &info), out, cap);
}

/* No lookup has leased anything during a load (the leases are volatile):
 * "0", else "leased". */
static void ask_object_read_lease_end(probe *p, char *out, size_t cap)
{
    snprintf(out, cap, "%s", p->api->object_read_lease_end(p->host, p->key) == 0 ? "0" : "leased");
}

/* A version (version()), then object_get (which waits for the load), then
 * the version again: "same" when the first answer was already the loaded
 * store's (the version waited for the load too), "moved" otherwise, "0"
 * when the host keeps none. */
static void ask_a_version(probe *p, uint64_t (*version)(smp_host *), char *out, size_t cap)
{
    uint64_t v = version(p->host);
    smp_object_info info;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    (void)p->api->object_get(p->host, p->key, &info);
    uint64_t again = version(p->host);
    snprintf(out, cap, "%s", v == 0 ? "0" : v == again ? "same" : "moved");
}

static void ask_objects_version(probe *p, char *out, size_t cap)
{
    ask_a_version(p, p->api->objects_version, out, cap);
}

static void ask_objects_loss_version(probe *p, char *out, size_t cap)
{
    ask_a_version(p, p->api->objects_loss_version, out, cap);
}

static void ask_group_list(probe *p, char *out, size_t cap)
{
    uint64_t n = 0;
    int k = p->api->group_list(p->host, p->group, NULL, 100000, count_visit, &n);
    if (k < 0) answer(k, out, cap);
    else snprintf(out, cap, "%llu", (unsigned long long)n);
}

static void ask_group_count(probe *p, char *out, size_t cap)
{
    snprintf(out, cap, "%llu", (unsigned long long)p->api->group_count(p->host, p->group));
}

static void ask_group_set_managed(probe *p, char *out, size_t cap)
{
    answer(p->api->group_set_managed(p->host, p->group, 1, done, p), out, cap);
}

static void ask_ensure_cold(probe *p, char *out, size_t cap)
{
    answer(p->api->ensure_cold(p->host, p->key, done, p), out, cap);
}

static void ask_ensure_memory(probe *p, char *out, size_t cap)
{
    answer(p->api->ensure_memory(p->host, p->key, done, p), out, cap);
}

static void ask_release_memory(probe *p, char *out, size_t cap)
{
    answer(p->api->release_memory(p->host, p->key, done, p), out, cap);
}

static void ask_remove_object(probe *p, char *out, size_t cap)
{
    answer(p->api->remove_object(p->host, p->key, done, p), out, cap);
}

static void ask_memory_usage(probe *p, char *out, size_t cap)
{
    uint64_t used = 0, capacity = 0;
    p->api->memory_usage(p->host, &used, &capacity);
    snprintf(out, cap, "%llu", (unsigned long long)used);
}

/* Every member of smp_host_api after its header, in table order: ask is the
 * call of a member that reads or changes objects; why says what one that
 * does not touches instead. */
typedef struct member {
    size_t off;
    const char *name;
    void (*ask)(probe *p, char *out, size_t cap);
    const char *why;
} member;

#define M_OBJECTS(f) {offsetof(smp_host_api, f), #f, ask_##f, NULL}
#define M_OTHER(f, why) {offsetof(smp_host_api, f), #f, NULL, why}

static const member members[] = {
    M_OTHER(register_oplog_type, "registration, init() only"),
    M_OTHER(register_snapshot_section, "registration, init() only"),
    M_OTHER(register_guard, "registration, init() only"),
    M_OTHER(register_tick, "registration, init() only"),
    M_OTHER(register_rpc_service, "registration, init() only"),
    M_OTHER(register_event_handler, "registration, init() only"),
    M_OTHER(register_metric, "registration, init() only"),
    M_OTHER(metric_add, "the plugin's metrics"),
    M_OTHER(metric_set, "the plugin's metrics"),
    M_OTHER(writer_write, "the section being saved"),
    M_OTHER(reader_data, "the section being loaded"),
    M_OTHER(rpc_reply, "a call of the plugin's service"),
    M_OTHER(oplog_append, "the plugin's own records"),
    M_OBJECTS(object_get),
    M_OBJECTS(group_list),
    M_OBJECTS(group_count),
    M_OBJECTS(group_set_managed),
    M_OBJECTS(ensure_cold),
    M_OBJECTS(ensure_memory),
    M_OBJECTS(release_memory),
    M_OBJECTS(remove_object),
    M_OBJECTS(memory_usage),
    M_OTHER(config_get, "the config"),
    M_OTHER(now_ms, "the clock"),
    M_OTHER(wall_ms, "the clock"),
    M_OTHER(is_leader, "the HA role"),
    M_OTHER(ha_mode, "the config"),
    M_OTHER(log, "stderr"),
    M_OTHER(alloc, "the allocator"),
    M_OTHER(free, "the allocator"),
    M_OTHER(rpc_caller, "a call of the plugin's service"),
    M_OTHER(rpc_revision_quota, "a call of the plugin's service and the tenant limits"),
    M_OTHER(config_keys, "the config"),
    M_OBJECTS(objects_version),
    M_OBJECTS(object_read_lease_end),
    M_OBJECTS(objects_loss_version),
    M_OTHER(rpc_wait_for_nodes, "a call of the plugin's service (the key's replicas decide only "
                                "whether that call is held)"),
    M_OTHER(claim_key_space, "registration, init() only (what clients may change, not objects)"),
    M_OTHER(tick_soon, "the plugin's own reconcile tick"),
};

#define N_MEMBERS (sizeof(members) / sizeof(members[0]))

static const member *member_at(size_t off)
{
    for (size_t i = 0; i < N_MEMBERS; i++)
        if (members[i].off == off) return &members[i];
    return NULL;
}

static const member *member_named(const char *name)
{
    for (size_t i = 0; i < N_MEMBERS; i++)
        if (members[i].ask != NULL && strcmp(members[i].name, name) == 0) return &members[i];
    return NULL;
}

/* Append to p->seen (cut at its end). */
static void note(probe *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(probe *p, const char *fmt, ...)
{
    size_t n = strlen(p->seen);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->seen + n, sizeof(p->seen) - n, fmt, ap);
    va_end(ap);
}

/* The offsets of the host's table (up to its struct_size) members[] has no
 * entry for. */
static void note_uncovered(probe *p)
{
    const size_t step = sizeof(void (*)(void));
    int any = 0;
    note(p, "uncovered=");
    for (size_t off = offsetof(smp_host_api, register_oplog_type);
         off + step <= p->api->struct_size; off += step) {
        if (member_at(off) != NULL) continue;
        note(p, "%s%zu", any ? "," : "", off);
        any = 1;
    }
    if (!any) note(p, "none");
}

/* -- the whole group ----------------------------------------------------------------- */

static int visit(void *arg, const smp_object_info *obj)
{
    page *pg = arg;
    smp_object_info again;
    memset(&again, 0, sizeof(again));
    again.struct_size = sizeof(again);
    size_t n = strlen(obj->key);
    if (n >= sizeof(pg->last)) {
        pg->bad = 1;
        return 0;
    }
    memcpy(pg->last, obj->key, n + 1);
    if (pg->p->api->object_get(pg->p->host, pg->last, &again) == SMP_OK) pg->found++;
    return 0;
}

/* The whole group: its member count, every member listed and found again,
 * the memory in use, appended to p->seen. */
static void ask_group(probe *p)
{
    uint64_t count = p->api->group_count(p->host, p->group);
    uint64_t listed = 0, used = 0, capacity = 0;
    page pg = {p, "", 0, 0};
    for (;;) {
        int k = p->api->group_list(p->host, p->group, pg.last[0] ? pg.last : NULL, PROBE_PAGE,
                                   visit, &pg);
        if (k <= 0 || pg.bad) break;
        listed += (uint64_t)k;
        if (k < PROBE_PAGE) break;
    }
    p->api->memory_usage(p->host, &used, &capacity);
    note(p, " count=%llu listed=%llu found=%llu used=%llu", (unsigned long long)count,
         (unsigned long long)listed, (unsigned long long)pg.found, (unsigned long long)used);
}

/* Everything the probe asks at its section load, kept in p->seen: the
 * member named by first before any other, then every other member that
 * touches objects, then the whole group; the answers in table order. */
static void ask(probe *p)
{
    char answers[N_MEMBERS][64];
    const member *first = p->first[0] ? member_named(p->first) : NULL;
    if (first != NULL) first->ask(p, answers[first - members], sizeof(answers[0]));
    for (size_t i = 0; i < N_MEMBERS; i++)
        if (members[i].ask != NULL && &members[i] != first)
            members[i].ask(p, answers[i], sizeof(answers[i]));
    p->seen[0] = '\0';
    note_uncovered(p);
    note(p, " first=%s", first != NULL ? first->name : "none");
    for (size_t i = 0; i < N_MEMBERS; i++)
        if (members[i].ask != NULL) note(p, " %s=%s", members[i].name, answers[i]);
    ask_group(p);
}

static int probe_save(void *plugin, smp_writer *w)
{
    (void)plugin;
    (void)w;
    return SMP_OK; /* an empty section: it exists to be loaded */
}

static int probe_load(void *plugin, smp_reader *r, uint16_t encver)
{
    probe *p = plugin;
    (void)r;
    (void)encver;
    ask(p);
    return p->fail_load ? SMP_EIO : SMP_OK;
}

static int rpc_seen(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    probe *p = plugin;
    (void)body;
    (void)len;
    return p->api->rpc_reply(call, SMP_OK, (const uint8_t *)p->seen, strlen(p->seen));
}

/* The names of the members that touch objects, in table order. */
static int rpc_members(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    probe *p = plugin;
    char names[1024] = "";
    (void)body;
    (void)len;
    for (size_t i = 0; i < N_MEMBERS; i++) {
        size_t n = strlen(names);
        if (members[i].ask != NULL)
            snprintf(names + n, sizeof(names) - n, "%s%s", n ? " " : "", members[i].name);
    }
    return p->api->rpc_reply(call, SMP_OK, (const uint8_t *)names, strlen(names));
}

static const smp_rpc_method methods[] = {
    {sizeof(smp_rpc_method), PROBE_SEEN, "seen", rpc_seen, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), PROBE_MEMBERS, "members", rpc_members, SMP_ROLE_ADMIN},
};

static const smp_rpc_service service = {sizeof(smp_rpc_service), PROBE_SERVICE, "objects_probe",
                                        methods, 2};

static const smp_snapshot_section section = {sizeof(smp_snapshot_section), "objects_probe", 1,
                                              probe_save, probe_load};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    smp_config_value v;
    probe *p = calloc(1, sizeof(*p));
    if (p == NULL) return SMP_ENOMEM;
    p->host = h;
    p->api = api;
    snprintf(p->group, sizeof(p->group), "probe");
    if (api->config_get(h, SMP_CONFIG_PLUGIN, "group", &v) == SMP_OK) {
        if (v.type != SMP_CONFIG_STRING || strlen(v.s) >= sizeof(p->group)) {
            api->log(h, SMP_LOG_ERROR, "group must be a name shorter than 256 bytes");
            rc = SMP_EINVAL;
            goto free_probe;
        }
        snprintf(p->group, sizeof(p->group), "%s", v.s);
    }
    snprintf(p->key, sizeof(p->key), "probe/member/0299");
    if (api->config_get(h, SMP_CONFIG_PLUGIN, "key", &v) == SMP_OK) {
        if (v.type != SMP_CONFIG_STRING || strlen(v.s) >= sizeof(p->key)) {
            api->log(h, SMP_LOG_ERROR, "key must be a string shorter than 1024 bytes");
            rc = SMP_EINVAL;
            goto free_probe;
        }
        snprintf(p->key, sizeof(p->key), "%s", v.s);
    }
    if (api->config_get(h, SMP_CONFIG_PLUGIN, "first", &v) == SMP_OK) {
        if (v.type != SMP_CONFIG_STRING || member_named(v.s) == NULL) {
            api->log(h, SMP_LOG_ERROR, "first must name a host API member that touches objects");
            rc = SMP_EINVAL;
            goto free_probe;
        }
        snprintf(p->first, sizeof(p->first), "%s", v.s);
    }
    if (api->config_get(h, SMP_CONFIG_PLUGIN, "fail_load", &v) == SMP_OK) {
        if (v.type != SMP_CONFIG_BOOL) {
            api->log(h, SMP_LOG_ERROR, "fail_load must be true or false");
            rc = SMP_EINVAL;
            goto free_probe;
        }
        p->fail_load = v.b;
    }
    if ((rc = api->register_snapshot_section(h, &section)) < 0 ||
        (rc = api->register_rpc_service(h, &service)) < 0)
        goto free_probe;
    *plugin = p;
    return SMP_OK;
free_probe:
    free(p);
    return rc;
}

static void fini(void *plugin)
{
    free(plugin);
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "objects_probe", "1.0.0", SMP_HOST_CAP_RPC_DISPATCH, 0, 0, init, fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
