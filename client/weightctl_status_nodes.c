/* weightctl_status_nodes.c -- the nodes of `weightctl status`: each node the
 * master knows, up or down, with its cold tier as the node last reported it
 * (StatusResponse.node_status): the size of the cold directory's file
 * system, how much of it the node may still write and how much all its
 * files take (the file system's figures: the master does not know the bytes
 * of one node's cold files), and how many cold writes failed since the node
 * started (by cause: no space, other). A cold tier with less than
 * WCTL_COLD_NEARLY_FULL_PCT free gets a warning line. A node without a cold
 * directory shows "none"; one that does not report (a store_node from before
 * the report) shows "unknown", never 0 bytes. In --json: the array
 * node_list, whose sizes are null when not known. */
#include <stdio.h>

#include "weightctl.h"
#include "weightctl_master.h"

int wctl_cold_nearly_full(const kvc_node *node)
{
    return node->cold == KVC_COLD_KNOWN && node->cold_total > 0 &&
           (double)node->cold_free * 100.0 < (double)node->cold_total * WCTL_COLD_NEARLY_FULL_PCT;
}

/* ", N failed writes" and, when there were some, their causes. */
static void failures_text(const kvc_node *node, char *out, size_t cap)
{
    uint64_t all = node->cold_fail_no_space + node->cold_fail_other;
    if (all == 0) {
        snprintf(out, cap, ", 0 failed writes");
        return;
    }
    snprintf(out, cap, ", %llu failed write%s (%llu no space, %llu other)", (unsigned long long)all,
             all == 1 ? "" : "s", (unsigned long long)node->cold_fail_no_space,
             (unsigned long long)node->cold_fail_other);
}

void wctl_status_nodes_text(const ctl *x, const kvc_node *nodes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const kvc_node *node = &nodes[i];
        char used[48], total[48], avail[48], fails[128];
        const char *state = node->up ? "up" : "down, as it last reported";
        failures_text(node, fails, sizeof(fails));
        switch (node->cold) {
        case KVC_COLD_NONE:
            printf("node      %s (%s); cold: none (no cold directory)\n", node->id, state);
            break;
        case KVC_COLD_UNKNOWN:
            printf("node      %s (%s); cold: unknown (the node does not report its cold tier: a "
                   "store_node from before the report)\n", node->id, state);
            break;
        case KVC_COLD_ERROR:
            printf("node      %s (%s); cold: size unknown (%s)%s\n", node->id, state,
                   node->cold_error, fails);
            break;
        case KVC_COLD_KNOWN:
            wctl_size_text((double)node->cold_used, x->bytes, used, sizeof(used));
            wctl_size_text((double)node->cold_total, x->bytes, total, sizeof(total));
            wctl_size_text((double)node->cold_free, x->bytes, avail, sizeof(avail));
            /* The file system's figures (statvfs), not the cold tier's own:
             * in use counts every file on it, and free is what the node may
             * still write (not total - in use: the reserved blocks are in
             * neither), so the line says whose they are. */
            printf("node      %s (%s); cold: file system of %s with %s free to the node (%s in "
                   "use by all its files)%s\n", node->id, state, total, avail, used, fails);
            break;
        }
        if (wctl_cold_nearly_full(node))
            printf("warning   node %s: cold tier nearly full: %s free of %s (%.1f%%, below %d%%) in "
                   "%s; cold copies fail once it is full\n", node->id, avail, total,
                   100.0 * (double)node->cold_free / (double)node->cold_total,
                   WCTL_COLD_NEARLY_FULL_PCT, node->cold_dir);
    }
}

void wctl_status_nodes_json(const kvc_node *nodes, size_t n)
{
    static const char *const states[] = {"none", "unknown", "error", "ok"};
    printf(",\"node_list\":[");
    for (size_t i = 0; i < n; i++) {
        const kvc_node *node = &nodes[i];
        int sized = node->cold == KVC_COLD_KNOWN;
        int counted = node->cold == KVC_COLD_KNOWN || node->cold == KVC_COLD_ERROR;
        printf("%s{\"id\":", i ? "," : "");
        wctl_json_str(node->id);
        printf(",\"up\":%s,\"cold\":{\"state\":\"%s\",\"dir\":", node->up ? "true" : "false",
               states[node->cold]);
        wctl_json_str(node->cold_dir);
        if (sized)
            printf(",\"total_bytes\":%llu,\"free_bytes\":%llu,\"used_bytes\":%llu,"
                   "\"nearly_full\":%s",
                   (unsigned long long)node->cold_total, (unsigned long long)node->cold_free,
                   (unsigned long long)node->cold_used, wctl_cold_nearly_full(node) ? "true" : "false");
        else
            printf(",\"total_bytes\":null,\"free_bytes\":null,\"used_bytes\":null,"
                   "\"nearly_full\":null");
        if (counted)
            printf(",\"write_failures\":%llu,\"write_failures_no_space\":%llu,"
                   "\"write_failures_other\":%llu",
                   (unsigned long long)(node->cold_fail_no_space + node->cold_fail_other),
                   (unsigned long long)node->cold_fail_no_space,
                   (unsigned long long)node->cold_fail_other);
        else
            printf(",\"write_failures\":null,\"write_failures_no_space\":null,"
                   "\"write_failures_other\":null");
        printf(",\"error\":");
        wctl_json_str(node->cold_error);
        printf("}}");
    }
    putchar(']');
}
