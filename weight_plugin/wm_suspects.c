/* wm_suspects.c -- the set of members reported lost (SMP_EVENT_REPLICA_LOST)
 * that the lifecycle's next round looks at.
 *
 * A node that goes down, or never comes back after a start, reports every
 * replica it held, one event each, all in one loop turn: 200,000 at 100,000
 * revisions. The set keeps at most WM_SUSPECTS_MAX members in report
 * order (past them the lifecycle validates every revision instead, a
 * bounded walk per round) and finds a key through an open-addressed index
 * of their hashes, so each report costs a hash and a probe or two -- not a
 * walk of the members kept (which took the loop 4,096 string compares a
 * report, over 10 s for such a storm). */
#include <stdlib.h>
#include <string.h>

#include "store_plugin.h"
#include "wm_suspects.h"

#define WM_SUSPECT_SLOTS (2u * WM_SUSPECTS_MAX) /* a power of two, half full at most */

static uint64_t wm_key_hash(const char *key)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)key; *c; c++) {
        h ^= *c;
        h *= 1099511628211ull;
    }
    return h;
}

/* The slot holding key (hash h), or the empty slot where it would go. */
static uint32_t *wm_slot_of(wm_suspects *s, const char *key, uint64_t h)
{
    for (uint32_t i = (uint32_t)h & (WM_SUSPECT_SLOTS - 1);; i = (i + 1) & (WM_SUSPECT_SLOTS - 1)) {
        uint32_t at = s->slots[i];
        if (at == 0) return &s->slots[i];
        const wm_suspect *x = &s->v[at - 1];
        if (x->hash == h && strcmp(x->key, key) == 0) return &s->slots[i];
    }
}

int wm_suspects_add(wm_suspects *s, const char *group, const char *key)
{
    if (s->n >= WM_SUSPECTS_MAX) return 0;
    if (s->slots == NULL) {
        if ((s->slots = calloc(WM_SUSPECT_SLOTS, sizeof(*s->slots))) == NULL) return SMP_ENOMEM;
        if ((s->v = malloc(WM_SUSPECTS_MAX * sizeof(*s->v))) == NULL) {
            free(s->slots);
            s->slots = NULL;
            return SMP_ENOMEM;
        }
    }
    uint64_t h = wm_key_hash(key);
    uint32_t *slot = wm_slot_of(s, key, h);
    if (*slot != 0) return 0;
    wm_suspect x = {strdup(group), strdup(key), h};
    if (x.group == NULL || x.key == NULL) {
        free(x.group);
        free(x.key);
        return SMP_ENOMEM;
    }
    s->v[s->n++] = x;
    *slot = (uint32_t)s->n;
    return 1;
}

void wm_suspects_keep(wm_suspects *s, size_t kept)
{
    s->n = kept;
    if (s->slots == NULL) return;
    memset(s->slots, 0, WM_SUSPECT_SLOTS * sizeof(*s->slots));
    for (size_t i = 0; i < kept; i++) *wm_slot_of(s, s->v[i].key, s->v[i].hash) = (uint32_t)i + 1;
}

void wm_suspects_clear(wm_suspects *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].group);
        free(s->v[i].key);
    }
    free(s->v);
    free(s->slots);
    memset(s, 0, sizeof(*s));
}
