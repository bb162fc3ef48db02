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
 * used as before, "default" when empty. */
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

int wm_tenant_visible(wm_plugin *p, smp_rpc_call *call, const char *tenant)
{
    const char *t = wm_tenant_of(p, call, tenant);
    return t != NULL && strcmp(t, tenant) == 0;
}
