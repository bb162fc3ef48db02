/* wm_access.c -- the last access of revisions, for AUTO's least recently
 * used order.
 *
 * A new lease moves a revision's last_access_ms when its record applies
 * (weight_metadata_store.c), so a grant is persisted with the lease itself.
 * A renewal, a release and a volatile grant (held in memory while the gate
 * of the lease records is closed) are accesses too, but their records carry
 * no access time: they move last_access_ms in memory at once
 * (wm_store_touch; no record, no new metadata generation) and the revision
 * is remembered here. The tick persists what was remembered lazily: at most
 * WM_ACCESS_PER_ROUND type-8 records per round, each repeating the
 * revision at its metadata generation with the newer last access (so no
 * generation bump, and no cooldown restarted: updated_ms is kept), once the
 * first access of the batch is WM_ACCESS_DELAY_MS old -- accesses in
 * between ride on one record. Such a record does not hold the revision
 * busy; one that a newer generation overtakes is ignored when applied,
 * and the newer record already carries the access (it was copied from
 * memory). What is remembered lives in memory only: a failover, or more
 * than WM_ACCESS_MAX revisions waiting, loses some accesses, which leaves
 * the order approximate, never wrong about anything but recency. */
#include <stdlib.h>
#include <string.h>

#include "wm_plugin.h"

#define WM_ACCESS_MAX 4096       /* revisions waiting at most */
#define WM_ACCESS_PER_ROUND 32   /* records per round at most */
#define WM_ACCESS_DELAY_MS 1000  /* from the first access of a batch */

typedef struct wm_access_entry {
    char *group;          /* owned */
    uint64_t since_ms;    /* host clock of its first unpersisted access */
} wm_access_entry;

struct wm_access {
    wm_access_entry *v;
    size_t n, cap;
};

void wm_access_note(wm_plugin *p, const wm_identity *id, uint64_t access_ms)
{
    if (!wm_store_touch(p->store, id, access_ms)) return;
    const wm_revision *rev = wm_store_get(p->store, id);
    if (rev == NULL) return;
    if (p->access == NULL && (p->access = calloc(1, sizeof(*p->access))) == NULL) return;
    struct wm_access *a = p->access;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i].group, rev->group_key) == 0) return; /* rides on its record */
    if (a->n == WM_ACCESS_MAX) {
        p->access_dropped++;
        return;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        wm_access_entry *v = realloc(a->v, cap * sizeof(*v));
        if (v == NULL) return;
        a->v = v;
        a->cap = cap;
    }
    char *g = strdup(rev->group_key);
    if (g == NULL) return;
    a->v[a->n].group = g;
    a->v[a->n].since_ms = p->api->now_ms(p->host);
    a->n++;
}

int wm_access_tick(wm_plugin *p)
{
    struct wm_access *a = p->access;
    if (a == NULL || a->n == 0) return 0;
    uint64_t now = p->api->now_ms(p->host);
    size_t kept = 0, written = 0;
    int stop = 0, more = 0;
    for (size_t i = 0; i < a->n; i++) {
        wm_access_entry *e = &a->v[i];
        const wm_revision *rev = wm_store_get_group(p->store, e->group);
        int keep = 0;
        if (rev == NULL ||
            (rev->availability != WM_AVAIL_READY && rev->availability != WM_AVAIL_DEGRADED)) {
            keep = 0; /* gone, or going: its access no longer matters */
        } else if (stop || now - e->since_ms < WM_ACCESS_DELAY_MS) {
            keep = 1; /* a later period's tick */
        } else if (written >= WM_ACCESS_PER_ROUND) {
            keep = 1;
            more = 1; /* due now: another round soon */
        } else {
            int rc = wm_submit_access(p, rev);
            if (rc == SMP_EGATE || rc == SMP_ENOTLEADER) {
                keep = 1; /* not now: kept, and the others too */
                stop = 1;
            } else if (rc == WM_OK) {
                written++; /* counted in access_records once applied */
            }
        }
        if (keep) a->v[kept++] = *e;
        else free(e->group);
    }
    a->n = kept;
    return more;
}

void wm_access_release(wm_plugin *p)
{
    struct wm_access *a = p->access;
    if (a == NULL) return;
    for (size_t i = 0; i < a->n; i++) free(a->v[i].group);
    free(a->v);
    free(a);
    p->access = NULL;
}
