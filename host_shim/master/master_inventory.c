/* master_inventory.c -- a node's cold-file inventory received in pages.
 *
 * A node registers with every cold file it holds (master_nodes.c reconciles
 * them with the replicas the master persisted). At a million files that is
 * far more than one RPC frame may carry (listen.max_frame_bytes), so a node
 * whose inventory is large sends it first in NODE_INVENTORY pages of one
 * session, then registers naming the session and its file count. The pages
 * wait here, keyed by node id, until that registration takes them: a
 * registration whose count does not match what arrived (a page lost to a
 * broken link or a leader change) is refused, and the node starts over with
 * a new session. A page of a new session drops an older one's; pages
 * nobody registers with are dropped MASTER_INVENTORY_IDLE_MS after the last.
 * A page is a word from its node: while they arrive, a node that has not
 * registered since the master's start is not silent (master_nodes.c).
 * Nothing here is persisted: like node liveness it is soft state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_uthash.h"
#include "master_internal.h"
#include "node_rpc.pb-c.h"

struct master_inventory {
    char *node_id;
    uint64_t session;
    NodeInventoryRequest **pages; /* decoded pages, owning the files */
    size_t n_pages, cap_pages;
    InventoryFile **files;        /* every page's files in order, borrowed */
    size_t n_files, cap_files;
    uint64_t last_ms;             /* master_now_ms of the newest page */
    UT_hash_handle hh;
};

void master_inventory_free(master_inventory *inv)
{
    if (inv == NULL) return;
    for (size_t i = 0; i < inv->n_pages; i++) node_inventory_request__free_unpacked(inv->pages[i], NULL);
    free(inv->pages);
    free(inv->files);
    free(inv->node_id);
    free(inv);
}

static void drop(master *m, master_inventory *inv)
{
    HASH_DEL(m->inventories, inv);
    master_inventory_free(inv);
}

/* The pending inventory of node_id for session: the one held, or a new
 * empty one (an older session's is dropped). NULL when out of memory. */
static master_inventory *pending(master *m, const char *node_id, uint64_t session)
{
    master_inventory *inv = NULL;
    HASH_FIND_STR(m->inventories, node_id, inv);
    if (inv != NULL && inv->session == session) return inv;
    if (inv != NULL) drop(m, inv);
    inv = calloc(1, sizeof(*inv));
    if (inv == NULL || (inv->node_id = strdup(node_id)) == NULL) {
        free(inv);
        return NULL;
    }
    inv->session = session;
    HASH_ADD_KEYPTR(hh, m->inventories, inv->node_id, strlen(inv->node_id), inv);
    return inv;
}

/* Append page (taking it) to inv. SMP_OK, SMP_ENOMEM (nothing taken). */
static int append(master_inventory *inv, NodeInventoryRequest *page)
{
    if (inv->n_pages == inv->cap_pages) {
        size_t cap = inv->cap_pages ? inv->cap_pages * 2 : 16;
        NodeInventoryRequest **v = realloc(inv->pages, cap * sizeof(*v));
        if (v == NULL) return SMP_ENOMEM;
        inv->pages = v;
        inv->cap_pages = cap;
    }
    if (inv->n_files + page->n_cold_files > inv->cap_files) {
        size_t cap = inv->cap_files ? inv->cap_files : 1024;
        while (cap < inv->n_files + page->n_cold_files) cap *= 2;
        InventoryFile **v = realloc(inv->files, cap * sizeof(*v));
        if (v == NULL) return SMP_ENOMEM;
        inv->files = v;
        inv->cap_files = cap;
    }
    memcpy(inv->files + inv->n_files, page->cold_files, page->n_cold_files * sizeof(*inv->files));
    inv->n_files += page->n_cold_files;
    inv->pages[inv->n_pages++] = page;
    return SMP_OK;
}

int master_inventory_h_page(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    char msg[256];
    int rc;
    NodeInventoryRequest *page = node_inventory_request__unpack(NULL, len, body);
    if (page == NULL)
        return rpc_reply_error(call, SMP_EPROTO, "body does not decode as NodeInventoryRequest");
    if (page->node_id[0] == '\0' || page->session == 0) {
        snprintf(msg, sizeof(msg), "node inventory: page of node '%.64s' names %s", page->node_id,
                 page->node_id[0] == '\0' ? "no node" : "no session (0)");
        rc = SMP_EINVAL;
        goto refuse;
    }
    master_inventory *inv = pending(m, page->node_id, page->session);
    if (inv == NULL) {
        snprintf(msg, sizeof(msg), "node inventory: out of memory");
        rc = SMP_ENOMEM;
        goto refuse;
    }
    if (inv->n_files + page->n_cold_files > MASTER_INVENTORY_MAX_FILES) {
        snprintf(msg, sizeof(msg), "node inventory: node %.64s: more than %u cold files in one "
                 "inventory; its session is dropped", page->node_id, MASTER_INVENTORY_MAX_FILES);
        drop(m, inv);
        rc = SMP_ERANGE;
        goto refuse;
    }
    if ((rc = append(inv, page)) < 0) {
        snprintf(msg, sizeof(msg), "node inventory: node %.64s: out of memory; its session is "
                 "dropped", page->node_id);
        drop(m, inv);
        goto refuse;
    }
    inv->last_ms = master_now_ms();
    NodeInventoryResponse resp = NODE_INVENTORY_RESPONSE__INIT;
    resp.files = inv->n_files;
    master_reply_msg(call, &resp.base);
    return SMP_OK;
refuse:
    node_inventory_request__free_unpacked(page, NULL);
    return rpc_reply_error(call, rc, msg);
}

int master_inventory_take(master *m, const char *node_id, uint64_t session, uint64_t files,
                          master_inventory **out, char *msg, size_t cap)
{
    master_inventory *inv = NULL;
    *out = NULL;
    HASH_FIND_STR(m->inventories, node_id, inv);
    if (inv == NULL || inv->session != session || inv->n_files != files) {
        snprintf(msg, cap, "node register: node %.64s announces an inventory of %llu cold files "
                 "in session %016llx, but %llu of them arrived%s: send its pages again",
                 node_id, (unsigned long long)files, (unsigned long long)session,
                 (unsigned long long)(inv != NULL && inv->session == session ? inv->n_files : 0),
                 inv != NULL && inv->session != session ? " (pages of another session are held)"
                                                        : "");
        if (inv != NULL && inv->session == session) drop(m, inv);
        return SMP_ESTATE;
    }
    HASH_DEL(m->inventories, inv);
    *out = inv;
    return SMP_OK;
}

InventoryFile **master_inventory_files(const master_inventory *inv, size_t *n, size_t *pages)
{
    if (n != NULL) *n = inv->n_files;
    if (pages != NULL) *pages = inv->n_pages;
    return inv->files;
}

uint64_t master_inventory_heard_ms(const master *m, const char *node_id)
{
    master_inventory *inv = NULL;
    HASH_FIND_STR(m->inventories, node_id, inv);
    return inv != NULL ? inv->last_ms : 0;
}

void master_inventory_expire(master *m, uint64_t now)
{
    master_inventory *inv, *tmp;
    HASH_ITER(hh, m->inventories, inv, tmp) {
        if (now - inv->last_ms < MASTER_INVENTORY_IDLE_MS) continue;
        fprintf(stderr, "store_master: node %s: %zu inventory files of session %016llx dropped "
                "(no registration took them within %u s)\n", inv->node_id, inv->n_files,
                (unsigned long long)inv->session, MASTER_INVENTORY_IDLE_MS / 1000);
        drop(m, inv);
    }
}

void master_inventory_clear(master *m)
{
    master_inventory *inv, *tmp;
    HASH_ITER(hh, m->inventories, inv, tmp) drop(m, inv);
}
