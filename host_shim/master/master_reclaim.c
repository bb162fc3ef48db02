/* master_reclaim.c -- what an applied record takes out of the state is
 * cleaned up on the nodes: cold files are deleted, memory ranges zeroed.
 *
 * A replica leaves the state in two ways: its object is removed (REMOVE,
 * or a PUT_END replacing the incarnation) or its replica list is rewritten
 * without it (a corrupt file dropped, a replica released). Its cold file
 * stays on the node's disk and its memory range keeps the object's bytes
 * until someone acts, so the commit path asks the object store to note
 * what such a record lets go of while it applies (obj_store_track_released)
 * and is told afterwards: every cold file no replica names any more gets a
 * DELETE_COLD task on its node, and every range the allocator has free
 * again is zeroed (master_scrub.c). This is live work only (recovery and a
 * standby's replay never come through here): a node that is down at that
 * moment, or a crash between the durable record and the unlink, leaves the
 * file behind, and the node's next registration deletes every file of its
 * inventory that no replica names (master_reclaim_inventory). Both are
 * counted in store_cold_files_reclaimed_total. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master_internal.h"
#include "node_rpc.pb-c.h"

void master_reclaim_before(master *m, uint16_t type)
{
    if (type == OBJ_REC_PUT_END || type == OBJ_REC_REMOVE) obj_store_track_released(master_objs(m));
}

/* 1 when key has a cold replica (any status) on node at path. */
static int still_named(master *m, const char *key, const char *node, const char *path)
{
    obj_replica reps[16];
    size_t n = 0;
    if (obj_object_replicas(master_objs(m), key, reps, 16, &n) < 0) return 0;
    if (n > 16) return 1; /* cannot see them all: keep the file */
    for (size_t i = 0; i < n; i++)
        if (reps[i].kind == SMP_REPLICA_COLD && reps[i].path && strcmp(reps[i].node, node) == 0 &&
            strcmp(reps[i].path, path) == 0)
            return 1;
    return 0;
}

typedef struct delete_ctx {
    char *node;
    char *name;
} delete_ctx;

static void on_deleted(master *m, void *arg, int status, const TaskResult *res)
{
    delete_ctx *d = arg;
    if (status == SMP_OK && res != NULL && res->status == 0) {
        host_metric_add(m->m.cold_reclaimed, NULL, 1);
    } else {
        fprintf(stderr, "store_master: node %s: deleting cold file %s failed: %s (%s); "
                        "its next registration retries\n",
                d->node, d->name, smp_strerror(status < 0 ? status : res ? res->status : SMP_EIO),
                res && res->error ? res->error : "");
    }
    free(d->node);
    free(d->name);
    free(d);
}

int master_reclaim_cold_file(master *m, const char *node, const char *key, const char *name)
{
    delete_ctx *d = calloc(1, sizeof(*d));
    int rc;
    if (d == NULL) return SMP_ENOMEM;
    d->node = strdup(node);
    d->name = strdup(name);
    if (!d->node || !d->name) {
        rc = SMP_ENOMEM;
        goto free_ctx;
    }
    rc = master_node_task(m, node, TASK_KIND__TASK_DELETE_COLD, key, 0, 0, NULL, name, on_deleted, d);
    if (rc == SMP_OK) return SMP_OK;
free_ctx:
    free(d->node);
    free(d->name);
    free(d);
    return rc;
}

/* A range the apply freed: zeroed on its node, unless the node is down
 * (fsck --repair zeroes it then). */
static void on_released_range(void *ctx, const char *node, const char *segment, uint64_t off,
                              uint64_t len)
{
    master *m = ctx;
    if (master_node_readable(m, node)) master_scrub_range(m, node, segment, off, len);
}

/* A cold file the apply dropped, which no replica names: deleted. A node
 * that is down deletes it at its next registration. */
static void on_released_file(void *ctx, const char *key, const char *node, const char *path)
{
    master_reclaim_cold_file(ctx, node, key, path);
}

void master_reclaim_after(master *m, int applied)
{
    obj_released_ops ops = {on_released_range, on_released_file, m};
    obj_store_take_released(master_objs(m), applied, &ops);
}

/* Files a registration's reclaim names in its one log line (all are counted). */
#define RECLAIM_LOG_NAMES 3

int master_reclaim_inventory(master *m, const char *node, const char **keys,
                             const char **names, const uint64_t *lengths, size_t n)
{
    int queued = 0;
    size_t orphans = 0;
    uint64_t bytes = 0;
    char named[RECLAIM_LOG_NAMES * 400] = "";
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (still_named(m, keys[i], node, names[i]) || master_persist_in_flight(m, keys[i])) continue;
        if (orphans < RECLAIM_LOG_NAMES && at < sizeof(named)) {
            int w = snprintf(named + at, sizeof(named) - at, "%s%s (%.200s)", orphans ? ", " : "",
                             names[i], keys[i]);
            if (w > 0) at += (size_t)w;
        }
        orphans++;
        bytes += lengths != NULL ? lengths[i] : 0;
        if (master_reclaim_cold_file(m, node, keys[i], names[i]) == SMP_OK) queued++;
    }
    if (orphans > 0)
        fprintf(stderr, "store_master: node %s: %zu cold file(s), %llu data bytes, belong to no replica; "
                "deleting them (%d queued): %s%s\n", node, orphans, (unsigned long long)bytes, queued,
                named, orphans > RECLAIM_LOG_NAMES ? ", ..." : "");
    return queued;
}
