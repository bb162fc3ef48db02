/* master_cold_usage.c -- the nodes' cold tiers in /metrics and ADMIN_STATUS
 * (master_cold_usage.h): the last report of each node, taken from its
 * registration and polls, turned into per-node series and status entries. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_rpc.pb-c.h"
#include "master_cold_usage.h"
#include "wm_bytes.h"
#include "node_rpc.pb-c.h"

void master_cold_usage_take(master_cold_usage *dst, const ColdTierUsage *u)
{
    memset(dst, 0, sizeof(*dst));
    if (u == NULL) return; /* a node from before the report: unknown */
    dst->reported = 1;
    dst->total_bytes = u->total_bytes;
    dst->free_bytes = u->free_bytes;
    dst->used_bytes = u->used_bytes;
    snprintf(dst->error, sizeof(dst->error), "%s", u->error ? u->error : "");
    dst->failures_no_space = u->write_failures_no_space;
    dst->failures_other = u->write_failures_other;
}

int master_cold_usage_nearly_full(const master_cold_usage *u)
{
    return u->reported && u->error[0] == '\0' && u->total_bytes > 0 &&
           (double)u->free_bytes * 100.0 < (double)u->total_bytes * MASTER_COLD_NEARLY_FULL_PCT;
}

int master_cold_usage_change(const master_cold_usage *before, const master_cold_usage *after,
                             char *line, size_t cap)
{
    int was_full, full;
    uint64_t failed;
    char free_text[32], total_text[32];
    if (!after->reported) return 0;
    was_full = master_cold_usage_nearly_full(before);
    full = master_cold_usage_nearly_full(after);
    /* a node that restarted counts from 0: all of its count is new */
    failed = after->failures_no_space >= before->failures_no_space
                 ? after->failures_no_space - before->failures_no_space
                 : after->failures_no_space;
    if (!before->reported && !full && failed == 0) return 0;
    wm_human_bytes((double)after->free_bytes, free_text, sizeof(free_text));
    wm_human_bytes((double)after->total_bytes, total_text, sizeof(total_text));
    if (full && (!was_full || failed > 0)) {
        int k = snprintf(line, cap, "cold tier nearly full: %s free of %s (%.1f%%, below %d%%)",
                         free_text, total_text,
                         (double)after->free_bytes * 100.0 / (double)after->total_bytes,
                         MASTER_COLD_NEARLY_FULL_PCT);
        if (failed > 0 && k > 0 && (size_t)k < cap)
            snprintf(line + k, cap - (size_t)k, "; %" PRIu64 " cold write%s failed for lack of "
                     "space since the last report", failed, failed == 1 ? "" : "s");
        return 1;
    }
    if (failed > 0) {
        snprintf(line, cap, "%" PRIu64 " cold write%s failed for lack of space since the last "
                 "report (the file system's free bytes are not a quota's)", failed,
                 failed == 1 ? "" : "s");
        return 1;
    }
    if (was_full && !full && after->error[0] == '\0') {
        snprintf(line, cap, "cold tier has room again: %s free of %s", free_text, total_text);
        return 1;
    }
    return 0;
}

int master_cold_usage_register(master *m)
{
    static const char *const node_label[] = {"node", NULL};
    static const char *const cause_labels[] = {"node", "cause", NULL};
    int rc = host_metrics_register(m->metrics, SMP_METRIC_GAUGE, "store_node_cold_capacity_bytes",
                                   "Size of the file system holding each node's cold directory, as "
                                   "the node last reported it (no series: the node does not "
                                   "report it, or has no cold directory)", node_label,
                                   &m->m.node_cold_capacity);
    if (rc < 0) return rc;
    rc = host_metrics_register(m->metrics, SMP_METRIC_GAUGE, "store_node_cold_free_bytes",
                               "Bytes each node may still write into its cold directory's file "
                               "system, as the node last reported it", node_label,
                               &m->m.node_cold_free);
    if (rc < 0) return rc;
    return host_metrics_register(m->metrics, SMP_METRIC_COUNTER, "store_node_cold_write_failures_total",
                                 "Cold writes (persists of a replica to the cold directory) that "
                                 "failed on each node since it started, by cause (no_space: "
                                 "ENOSPC or EDQUOT; other: an I/O error, a missing directory, bytes "
                                 "that did not read back right)", cause_labels,
                                 &m->m.node_cold_write_failures);
}

static void refresh_node(void *arg, const char *id, int up, const char *cold_dir,
                         const master_cold_usage *cold)
{
    master *m = arg;
    (void)up;
    if (cold_dir == NULL || cold_dir[0] == '\0' || !cold->reported) return;
    const char *node[1] = {id};
    if (cold->error[0] == '\0') {
        host_metric_set(m->m.node_cold_capacity, node, (double)cold->total_bytes);
        host_metric_set(m->m.node_cold_free, node, (double)cold->free_bytes);
    }
    const char *no_space[2] = {id, "no_space"}, *other[2] = {id, "other"};
    host_metric_set(m->m.node_cold_write_failures, no_space, (double)cold->failures_no_space);
    host_metric_set(m->m.node_cold_write_failures, other, (double)cold->failures_other);
}

void master_cold_usage_refresh(master *m)
{
    master_nodes_each(m, refresh_node, m);
}

struct master_node_status_view {
    size_t n, cap;
    NodeStatus *msgs;
    NodeStatus **ptrs;
};

static void status_node(void *arg, const char *id, int up, const char *cold_dir,
                        const master_cold_usage *cold)
{
    master_node_status_view *v = arg;
    if (v->n == v->cap) return; /* nodes added meanwhile: none (the loop thread runs both) */
    NodeStatus *s = &v->msgs[v->n];
    node_status__init(s);
    s->id = (char *)id;
    s->up = up != 0;
    s->cold_dir = (char *)(cold_dir ? cold_dir : "");
    s->cold_reported = cold->reported != 0;
    s->cold_total_bytes = cold->total_bytes;
    s->cold_free_bytes = cold->free_bytes;
    s->cold_used_bytes = cold->used_bytes;
    s->cold_error = (char *)cold->error;
    s->cold_write_failures_no_space = cold->failures_no_space;
    s->cold_write_failures_other = cold->failures_other;
    v->ptrs[v->n++] = s;
}

static void count_node(void *arg, const char *id, int up, const char *cold_dir,
                       const master_cold_usage *cold)
{
    (void)id;
    (void)up;
    (void)cold_dir;
    (void)cold;
    (*(size_t *)arg)++;
}

size_t master_node_status_fill(master *m, master_node_status_view **out)
{
    size_t n = 0;
    master_nodes_each(m, count_node, &n);
    master_node_status_view *v = calloc(1, sizeof(*v));
    *out = v;
    if (v == NULL) return 0;
    v->msgs = calloc(n ? n : 1, sizeof(*v->msgs));
    v->ptrs = calloc(n ? n : 1, sizeof(*v->ptrs));
    if (v->msgs == NULL || v->ptrs == NULL) return 0; /* the status goes without nodes */
    v->cap = n;
    master_nodes_each(m, status_node, v);
    return v->n;
}

NodeStatus **master_node_status_ptrs(master_node_status_view *v)
{
    return v != NULL ? v->ptrs : NULL;
}

void master_node_status_free(master_node_status_view *v)
{
    if (v == NULL) return;
    free(v->msgs);
    free(v->ptrs);
    free(v);
}
