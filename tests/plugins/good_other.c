/* good_other.c -- a second good test plugin, to check what belongs to whom.
 *
 * It registers OpLog type 13 (ungated) and a guard that vetoes keys under
 * "other/", claims "other/" as its key space (ABI 1.9), and exports
 * good_other_append() so a test can try to append a type that another plugin
 * registered. */
#include <stddef.h>
#include <string.h>

#include "store_plugin.h"

static smp_host *g_host;
static const smp_host_api *g_api;
static int g_state_word;

static int replay(void *plugin, const smp_record *rec) { (void)plugin, (void)rec; return SMP_OK; }
static int veto_other(void *plugin, const smp_guard_request *req)
{
    (void)plugin;
    return req->key != NULL && strncmp(req->key, "other/", 6) == 0 ? SMP_GUARD_VETO : SMP_GUARD_ALLOW;
}

static const smp_oplog_type record_type = {sizeof(smp_oplog_type), 13, 1, 1, "OTHER_RECORD", NULL, replay, NULL};
static const smp_guard guard = {sizeof(smp_guard), veto_other};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    g_host = h, g_api = api;
    if ((rc = api->register_oplog_type(h, &record_type)) < 0) return rc;
    if ((rc = api->register_guard(h, &guard)) < 0) return rc;
    if ((rc = api->claim_key_space(h, "other/")) < 0) return rc;
    *plugin = &g_state_word;
    return SMP_OK;
}

static void fini(void *plugin) { (void)plugin; }

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "good_other", "0.1", 0, 0, 0, init, fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }

int good_other_append(uint16_t type)
{
    return g_api->oplog_append(g_host, type, 1, "x", 1, NULL, NULL);
}
