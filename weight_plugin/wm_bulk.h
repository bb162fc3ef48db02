/* wm_bulk.h -- memory for the large buffers of a section load and the index
 * tables.
 *
 * Loading the weight_metadata section at 100,000 revisions fills tens of MB:
 * the array of decoded revisions and the revisions' slab. Each is mapped on
 * its own, so that it goes back to the kernel whole. wm_bulk_alloc takes the
 * kernel's default pages; wm_bulk_alloc_huge asks for transparent huge
 * pages, for the index tables probed at random for as long as the plugin
 * runs (host_bulk.h says why the buffers a load fills do not). The host has
 * the same tool (host_bulk.h); the plugin carries its own copy because it
 * never links against the host. */
#ifndef WM_BULK_H
#define WM_BULK_H

#include <stddef.h>

/* len bytes (len > 0) of zeroed memory, aligned for any object, or NULL.
 * Release with wm_bulk_free(p, len), the same len; NULL is a no-op there. */
void *wm_bulk_alloc(size_t len);
/* wm_bulk_alloc with transparent huge pages asked for. */
void *wm_bulk_alloc_huge(size_t len);
void wm_bulk_free(void *p, size_t len);

#endif /* WM_BULK_H */
