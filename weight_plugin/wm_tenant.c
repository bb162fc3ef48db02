/* wm_tenant.c -- which tenant a weight RPC acts for, from the caller the
 * host authenticated (smp_host_api.rpc_caller, ABI 1.2), never from the
 * tenant the request names.
 *
 * With the host's authentication on, a request's tenant that is empty means
 * the caller's own; a non-admin caller naming another tenant is answered as
 * if that tenant's revisions did not exist (NOT_FOUND for one revision, an
 * empty page for a list), so neither the refusal nor its message tells one
 * tenant anything about another's. An admin may name any tenant. With
 * authentication off (or a host older than ABI 1.2) the request's tenant is
 * used as before, "default" when empty.
 *
 * A tenant may also be held to a number of live revisions (the host's
 * auth.limits max_revisions, asked through smp_host_api.rpc_revision_quota,
 * ABI 1.3): an import or a PUT_FIRST replacement that would start one more
 * is refused before anything is written. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "wm_mgmt.h"

/* The caller of call as the host reports it; an older host: open. */
static void wm_caller_of(wm_plugin *p, smp_rpc_call *call, smp_caller *who)
{
    memset(who, 0, sizeof(*who));
    who->struct_size = sizeof(*who);
    who->role = SMP_ROLE_ADMIN;
    if (!SMP_HOST_HAS(p->api, rpc_caller) || p->api->rpc_caller == NULL ||
        p->api->rpc_caller(call, who) < 0 || !who->auth_enabled || who->tenant == NULL) {
        who->auth_enabled = 0;
        who->tenant = NULL;
        who->role = SMP_ROLE_ADMIN;
    }
}

const char *wm_tenant_of(wm_plugin *p, smp_rpc_call *call, const char *wire)
{
    smp_caller who;
    int named = wire != NULL && wire[0] != '\0';
    wm_caller_of(p, call, &who);
    if (!who.auth_enabled) return named ? wire : "default";
    if (!named) return who.tenant;
    if (who.role == SMP_ROLE_ADMIN || strcmp(wire, who.tenant) == 0) return wire;
    return NULL;
}

const char *wm_caller_tenant(wm_plugin *p, smp_rpc_call *call)
{
    smp_caller who;
    wm_caller_of(p, call, &who);
    return who.auth_enabled && who.tenant != NULL ? who.tenant : "";
}

int wm_tenant_visible(wm_plugin *p, smp_rpc_call *call, const char *tenant)
{
    const char *t = wm_tenant_of(p, call, tenant);
    return t != NULL && strcmp(t, tenant) == 0;
}

/* The live revisions of tenant: IMPORTING, READY or DEGRADED in the store
 * (DELETING and DELETED are on their way out), plus imports whose first
 * record is still being made durable. The store is in identity order, so
 * this reads only tenant's revisions. */
static uint64_t live_revisions(wm_plugin *p, const char *tenant)
{
    const wm_identity lo = {tenant, "", "", "", 0};
    uint64_t n = 0;
    size_t count = wm_store_revision_count(p->store);
    for (size_t i = wm_store_revision_lower_bound(p->store, &lo); i < count; i++) {
        const wm_revision *r = wm_store_revision_at(p->store, i);
        if (strcmp(r->id.tenant_id, tenant) != 0) break;
        if (r->availability == WM_AVAIL_IMPORTING || r->availability == WM_AVAIL_READY ||
            r->availability == WM_AVAIL_DEGRADED)
            n++;
    }
    for (const wm_txn *t = p->pending; t != NULL; t = t->next)
        if (t->kind == WM_TXN_UPSERT && t->up.revision.availability == WM_AVAIL_IMPORTING &&
            strcmp(t->up.revision.id.tenant_id, tenant) == 0 &&
            wm_store_get(p->store, &t->up.revision.id) == NULL)
            n++;
    return n;
}

int wm_tenant_admit_revision(wm_plugin *p, smp_rpc_call *call, const char *tenant)
{
    uint64_t limit = 0, live;
    int rc;
    if (!SMP_HOST_HAS(p->api, rpc_revision_quota) || p->api->rpc_revision_quota == NULL)
        return 1;
    /* learn the limit first: without one nothing is counted */
    if (p->api->rpc_revision_quota(call, tenant, 0, &limit) == SMP_OK && limit == 0) return 1;
    live = live_revisions(p, tenant);
    if ((rc = p->api->rpc_revision_quota(call, tenant, live, &limit)) == SMP_OK) return 1;
    if (rc == SMP_ENOSPC)
        wm_reply_error(p, call, SMP_ENOSPC, "revision limit: tenant %s holds %" PRIu64 " live "
                       "revisions (importing, ready or degraded) and may hold %" PRIu64
                       " (auth.limits max_revisions); remove one first; nothing was changed",
                       tenant, live, limit);
    else
        wm_reply_error(p, call, rc, "revision limit: the host did not answer: %s",
                       smp_strerror(rc));
    return 0;
}
