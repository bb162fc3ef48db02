/* master_backend.c -- the master's side of the host API table.
 *
 * Plugins reach the master only through these functions (plugin_host.c checks
 * registration, gates and ownership first): durable OpLog appends, object and
 * group queries against the applied state, the persisted managed flag of a
 * group, removal of an object the plugin decided to delete (no guard asked:
 * the plugin is the guard), memory usage, snapshot section I/O and RPC
 * replies. The replica tasks (ensure cold / memory, release memory) are in
 * master_replicas.c. */
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include "master.h"
#include "master_internal.h"

uint64_t master_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t master_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void master_emit(master *m, const smp_event *ev)
{
    host_plugins_emit(m->plugins, ev);
}

/* The object as the applied state holds it, with the readable replica
 * counts limited to complete replicas on live nodes: a replica on a node
 * that stopped heartbeating cannot be read, so it does not count. One
 * lookup of the key (weight_is_exist asks this of every key of a
 * revision), and one of each node: the store interns its replicas' node
 * ids, so replicas on the same node carry the same pointer. */
static int be_object_get(void *ctx, const char *key, smp_object_info *out)
{
    master *m = ctx;
    obj_replica reps[16];
    size_t n = 0;
    int rc = obj_object_info_replicas(master_objs(m), key, out, reps, 16, &n);
    if (rc < 0 || n > 16) return rc;
    uint32_t mem = 0, cold = 0;
    const char *node = NULL; /* the last node looked up, and whether it is readable */
    int node_up = 0;
    for (size_t i = 0; i < n; i++) {
        if (reps[i].status != OBJ_REPLICA_COMPLETE) continue;
        if (reps[i].node != node) {
            node = reps[i].node;
            node_up = master_node_readable(m, node);
        }
        if (!node_up) continue;
        if (reps[i].kind == SMP_REPLICA_MEMORY) mem++;
        else cold++;
    }
    if (out->struct_size >= offsetof(smp_object_info, cold_replicas_readable) + sizeof(uint32_t)) {
        out->memory_replicas_readable = mem;
        out->cold_replicas_readable = cold;
    }
    return rc;
}

/* The objects' readable version (obj_readable_version): the object store
 * moves it on every change of an object or its replicas, master_nodes.c on
 * every node going up or down -- all that be_object_get's answer depends
 * on. */
static uint64_t be_objects_version(void *ctx)
{
    return obj_readable_version(master_objs(ctx));
}

/* The objects' loss version (obj_loss_version): the object store moves it
 * on every change that may take a complete replica away, master_nodes.c on
 * every node going down. */
static uint64_t be_objects_loss_version(void *ctx)
{
    return obj_loss_version(master_objs(ctx));
}

/* Hold a plugin's call while key waits for a node (master_node_wait.c):
 * none of its complete replicas is on a node that is up, and one is on a
 * node the master still waits for. */
static int be_rpc_wait_for_nodes(void *ctx, smp_rpc_call *call, const char *key,
                                 const uint8_t *body, size_t len)
{
    master *m = ctx;
    obj_replica reps[16];
    size_t n = 0;
    /* once the nodes settled nothing waits: a false weight_is_exist polled
     * on a DEGRADED revision looks no key up */
    if (m->nodes_settled || obj_object_replicas(master_objs(m), key, reps, 16, &n) < 0) return 0;
    return master_replicas_awaited(m, reps, n < 16 ? n : 16, master_now_ms()) &&
           master_node_wait_park(m, call, body, len);
}

static int be_group_list(void *ctx, const char *group, const char *after_key, size_t max,
                         smp_object_visit_fn fn, void *arg)
{
    master *m = ctx;
    return obj_group_list(master_objs(m), group, after_key, max, fn, arg);
}

static uint64_t be_group_count(void *ctx, const char *group)
{
    master *m = ctx;
    return obj_group_count(master_objs(m), group);
}

typedef struct done_ctx {
    smp_done_cb cb;
    void *arg;
} done_ctx;

static void on_done(master *m, void *arg, int status, uint64_t seq)
{
    done_ctx *c = arg;
    (void)m;
    (void)seq;
    c->cb(c->arg, status);
    free(c);
}

/* Commit a prepared host record and report to the plugin's callback. */
static int commit_done(master *m, obj_record *rec, const char *key, smp_done_cb cb, void *arg)
{
    int rc;
    done_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        obj_record_free(rec);
        return SMP_ENOMEM;
    }
    c->cb = cb;
    c->arg = arg;
    if ((rc = master_commit(m, rec, key, on_done, c)) < 0) free(c);
    return rc;
}

/* A plugin sets or clears the managed flag of a group; owner (the asking
 * plugin) owns it from then on. SMP_EVETO when another plugin owns it. */
static int be_group_set_managed(void *ctx, const char *owner, const char *group, int managed,
                                smp_done_cb cb, void *arg)
{
    master *m = ctx;
    obj_record rec = {0};
    if (cb == NULL) return SMP_EINVAL;
    int rc = obj_prepare_group_managed(master_objs(m), group, owner, managed, &rec);
    return rc < 0 ? rc : commit_done(m, &rec, NULL, cb, arg);
}

static int be_remove_object(void *ctx, const char *key, smp_done_cb cb, void *arg)
{
    master *m = ctx;
    obj_record rec = {0};
    if (cb == NULL) return SMP_EINVAL;
    int rc = obj_prepare_remove_unguarded(master_objs(m), key, master_now_ms(), &rec);
    return rc < 0 ? rc : commit_done(m, &rec, key, cb, arg);
}

static uint64_t be_object_read_lease_end(void *ctx, const char *key)
{
    master *m = ctx;
    return obj_lease_end(master_objs(m), key, master_now_ms());
}

static void be_memory_usage(void *ctx, uint64_t *used, uint64_t *capacity)
{
    master *m = ctx;
    obj_memory_usage(master_objs(m), used, capacity);
}

static int be_is_leader(void *ctx)
{
    return master_is_leader(ctx);
}

void master_backend_init(master *m)
{
    host_backend *b = &m->backend;
    b->ctx = m;
    b->host_caps = MASTER_HOST_CAPS;
    b->oplog_append = master_append_plugin;
    b->object_get = be_object_get;
    b->objects_version = be_objects_version;
    b->object_read_lease_end = be_object_read_lease_end;
    b->objects_loss_version = be_objects_loss_version;
    b->rpc_wait_for_nodes = be_rpc_wait_for_nodes;
    b->group_list = be_group_list;
    b->group_count = be_group_count;
    b->group_set_managed = be_group_set_managed;
    b->remove_object = be_remove_object;
    b->ensure_cold = master_ensure_cold;
    b->ensure_memory = master_ensure_memory;
    b->release_memory = master_release_memory;
    b->memory_usage = be_memory_usage;
    b->is_leader = be_is_leader;
    b->writer_write = snap_writer_write;
    b->reader_data = snap_reader_data;
    b->rpc_reply = rpc_reply;
    b->rpc_caller = rpc_server_call_caller;
    b->rpc_revision_quota = rpc_server_revision_quota;
    b->gate_confirmed = master_gate_confirmed;
}
