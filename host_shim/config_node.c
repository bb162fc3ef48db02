/* config_node.c -- the rules of the node: section that span keys (config.h):
 * an embedded node needs an RPC endpoint to register through; with
 * node.embedded false the keys only the embedded node reads are refused
 * (they would do nothing); reads without tickets need the explicit insecure
 * key; a put is not taken back before a write its ticket allows could have
 * been reported; and dedicating the embedded node to one tenant
 * (node.tenant, node.local_socket, node.local_peers: the store_node flags
 * --tenant, --local-socket and --local-peer, node_local.h) needs all three,
 * each checked as store_node checks its flags. Messages go through the
 * loader's cfg_fail (config_internal.h). */
#include <stdio.h>
#include <string.h>

#include "config_internal.h"
#include "node_local.h"
#include "rpc_auth.h"

/* The line of node.<key>, or 0 when the file does not set it. */
static unsigned line_of(const host_config_node *root, const char *key)
{
    const host_config_node *n = cfg_node_child(cfg_node_child(root, "node"), key);
    return n != NULL ? n->line : 0;
}

int cfg_apply_local_peers(cfg_ctx *c, host_config *cfg, host_config_node *seq, const char *path)
{
    char item_path[CFG_KEY_PATH_MAX];
    char why[256];
    for (size_t i = 0; i < seq->n_items; i++) {
        host_config_node *e = seq->items[i];
        cfg_path_index(item_path, path, i);
        if (e->kind != HOST_CFG_SCALAR || cfg_node_is_null(e))
            return cfg_fail(c, SMP_EINVAL, e->line, item_path,
                            "expected \"uid:N\" or \"gid:N\", found %s", cfg_node_kind_name(e));
        int rc = node_local_add_peer(&cfg->node_local_peers, e->scalar, why, sizeof(why));
        if (rc == SMP_ERANGE)
            return cfg_fail(c, rc, e->line, item_path, "more than %d uids or gids",
                            NODE_LOCAL_PEERS_MAX);
        if (rc < 0)
            return cfg_fail(c, rc, e->line, item_path,
                            "'%s' is not \"uid:N\" or \"gid:N\" (N a decimal user or group id)",
                            e->scalar);
    }
    return 0;
}

/* The node.* keys only the embedded node reads, with what a store_node
 * takes instead. The others (embedded, poll_ms, timeout_ms, ticket_ttl_ms,
 * put_timeout_ms) are the master's, for every node: it holds each poll up
 * to poll_ms and tells each node that period at its registration. */
static const struct {
    const char *key;
    const char *what; /* "<verb> the embedded node" */
    const char *flag; /* the store_node flag of the same */
} embedded_only[] = {
    {"id", "names the embedded node", "--id"},
    {"segment_dir", "places the embedded node's segment", "--segment-dir"},
    {"segment_bytes", "sizes the embedded node's segment", "--segment-bytes"},
    {"segment_prefault", "prefaults the embedded node's segment", "--segment-prefault"},
    {"cold_dir", "places the embedded node's cold files", "--cold-dir"},
    {"cold_verify_from_device", "makes the embedded node re-read what it persists",
     "--verify-from-device"},
    {"data_listen", "is the embedded node's data port", "--listen"},
    {"require_read_tickets", "sets whether the embedded node's reads need tickets",
     "--no-read-tickets"},
    {"allow_insecure_reads", "lets the embedded node serve reads without tickets",
     "--allow-insecure"},
    {"tenant", "dedicates the embedded node", "--tenant"},
    {"local_socket", "hands out the embedded node's segment", "--local-socket"},
    {"local_peers", "names who may map the embedded node's segment", "--local-peer"},
};

/* With node.embedded false, the first key of embedded_only the file sets
 * is refused: it would do nothing. 0, or cfg_fail's code. */
static int refuse_embedded_only(cfg_ctx *c, const host_config_node *root)
{
    const host_config_node *node = cfg_node_child(root, "node");
    char path[48];
    for (size_t i = 0; i < sizeof(embedded_only) / sizeof(embedded_only[0]); i++) {
        const host_config_node *n = cfg_node_child(node, embedded_only[i].key);
        if (n == NULL) continue;
        snprintf(path, sizeof(path), "node.%s", embedded_only[i].key);
        if (strcmp(embedded_only[i].key, "tenant") == 0)
            return cfg_fail(c, SMP_EINVAL, n->line, path,
                            "dedicates the embedded node, and node.embedded is false (a "
                            "store_node is dedicated with --tenant)");
        return cfg_fail(c, SMP_EINVAL, n->line, path,
                        "%s, and node.embedded is false: it would do nothing (a store_node "
                        "takes %s)", embedded_only[i].what, embedded_only[i].flag);
    }
    return 0;
}

int cfg_check_node(cfg_ctx *c, const host_config *cfg, const host_config_node *root)
{
    int peers = cfg->node_local_peers.n_uids + cfg->node_local_peers.n_gids > 0;
    int dedicated = cfg->node_tenant != NULL && cfg->node_tenant[0] != '\0';
    int rc;
    if (cfg->node_embedded && cfg->listen_tcp[0] == '\0' && cfg->listen_unix[0] == '\0')
        return cfg_fail(c, SMP_EINVAL, line_of(root, "embedded"), "node.embedded",
                        "true needs listen.tcp or listen.unix (the node registers through it)");
    if (!cfg->node_embedded && (rc = refuse_embedded_only(c, root)) != 0) return rc;
    if (!cfg->node_require_read_tickets && !cfg->node_allow_insecure_reads)
        return cfg_fail(c, SMP_EINVAL, line_of(root, "require_read_tickets"),
                        "node.require_read_tickets",
                        "false lets anyone who reaches the node's data port read any range; "
                        "it needs node.allow_insecure_reads: true as well");
    /* The master holds a node's poll up to poll_ms, and counts the node
     * silent from the poll's arrival: a timeout not well above it would
     * mark every idle node down while its poll is held. */
    if ((uint64_t)cfg->node_timeout_ms < 2ull * cfg->node_poll_ms) {
        unsigned line = line_of(root, "timeout_ms");
        return cfg_fail(c, SMP_ERANGE, line ? line : line_of(root, "poll_ms"),
                        line ? "node.timeout_ms" : "node.poll_ms",
                        "node.timeout_ms (%u) must be at least 2 x node.poll_ms (%llu): the "
                        "master holds a poll up to node.poll_ms, and a node it did not hear "
                        "from for node.timeout_ms is marked down", cfg->node_timeout_ms,
                        2ull * cfg->node_poll_ms);
    }
    /* A write may start until its ticket expires and is reported with the
     * node's next poll: the master must not take the range back before. */
    uint64_t least = (uint64_t)cfg->node_ticket_ttl_ms + 2ull * cfg->node_poll_ms + 1000u;
    if (cfg->node_put_timeout_ms < least) {
        /* blame what was written: put_timeout_ms, else ticket_ttl_ms, else poll_ms */
        const char *key = "put_timeout_ms";
        if (line_of(root, key) == 0) key = "ticket_ttl_ms";
        if (line_of(root, key) == 0) key = "poll_ms";
        char path[40];
        snprintf(path, sizeof(path), "node.%s", key);
        return cfg_fail(c, SMP_ERANGE, line_of(root, key), path,
                        "node.put_timeout_ms (%u) must be at least node.ticket_ttl_ms + 2 x "
                        "node.poll_ms + 1000 (%llu): a write may start until its ticket "
                        "expires, and the range must not be taken back before the node reports "
                        "it", cfg->node_put_timeout_ms, (unsigned long long)least);
    }
    if (!dedicated) {
        if (cfg->node_local_socket != NULL && cfg->node_local_socket[0] != '\0')
            return cfg_fail(c, SMP_EINVAL, line_of(root, "local_socket"), "node.local_socket",
                            "hands the segment to one tenant's processes; it needs node.tenant");
        if (peers)
            return cfg_fail(c, SMP_EINVAL, line_of(root, "local_peers"), "node.local_peers",
                            "name who may map one tenant's segment; they need node.tenant");
        return 0;
    }
    char why[300];
    if (rpc_auth_tenant_check(cfg->node_tenant, why, sizeof(why)) < 0)
        return cfg_fail(c, SMP_EINVAL, line_of(root, "tenant"), "node.tenant", "%s", why);
    if (cfg->node_local_socket == NULL || cfg->node_local_socket[0] == '\0')
        return cfg_fail(c, SMP_EINVAL, line_of(root, "tenant"), "node.tenant",
                        "needs node.local_socket (the Unix socket the segment is handed out "
                        "on)");
    if (!peers)
        return cfg_fail(c, SMP_EINVAL, line_of(root, "tenant"), "node.tenant",
                        "needs node.local_peers: at least one \"uid:N\" or \"gid:N\" (who may "
                        "map the segment)");
    return 0;
}
