/* wm_suspects.h -- the members reported lost that the lifecycle's next round
 * looks at (see wm_suspects.c). */
#ifndef WM_SUSPECTS_H
#define WM_SUSPECTS_H

#include <stddef.h>
#include <stdint.h>

#define WM_SUSPECTS_MAX 4096 /* members remembered at most; past them, a validate-all walk */

typedef struct wm_suspect {
    char *group; /* owned */
    char *key;   /* owned */
    uint64_t hash;
} wm_suspect;

/* Suspects in report order with an index by key. Zeroed is empty. */
typedef struct wm_suspects {
    wm_suspect *v;
    size_t n;
    uint32_t *slots; /* WM_SUSPECTS_MAX * 2 of them: index + 1 into v, 0 empty */
} wm_suspects;

/* Remember (group, key) unless key is there already or WM_SUSPECTS_MAX are:
 * 1 when added, 0 when not, SMP_ENOMEM (nothing changed). Constant work per
 * call, whatever the count (a node going down reports every replica it
 * held, one call each). */
int wm_suspects_add(wm_suspects *s, const char *group, const char *key);

/* The caller kept v[0..kept) (moved down in place, the others freed by it):
 * make that the set and rebuild the index. */
void wm_suspects_keep(wm_suspects *s, size_t kept);

/* Free every suspect and the set's storage; s is empty again. */
void wm_suspects_clear(wm_suspects *s);

#endif
