/* wc_reported.c -- the memory replicas this process reported corrupt, so
 * that a read that met one already reported says the replica was reported
 * even when the master, having dropped it, refuses the report again (see
 * wc_reported.h). A small ring under one mutex: reports are rare. */
#include "wc_reported.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct reported {
    char key[512];
    char node[64];
    char segment[64];
    uint64_t offset;
} reported;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static reported g_ring[WC_REPORTED_MAX];
static size_t g_next;  /* the slot the next note takes */
static size_t g_count; /* notes held, at most WC_REPORTED_MAX */

/* 1 when the arguments fit a note's fields (a longer one is never noted,
 * so never matched by truncation). */
static int fits(const char *key, const char *node, const char *segment)
{
    return key != NULL && strlen(key) < sizeof(((reported *)0)->key) &&
           strlen(node ? node : "") < sizeof(((reported *)0)->node) &&
           strlen(segment ? segment : "") < sizeof(((reported *)0)->segment);
}

void wc_reported_note(const char *key, const char *node, const char *segment, uint64_t offset)
{
    if (!fits(key, node, segment) || wc_reported_seen(key, node, segment, offset)) return;
    pthread_mutex_lock(&g_lock);
    reported *r = &g_ring[g_next];
    snprintf(r->key, sizeof r->key, "%s", key);
    snprintf(r->node, sizeof r->node, "%s", node ? node : "");
    snprintf(r->segment, sizeof r->segment, "%s", segment ? segment : "");
    r->offset = offset;
    g_next = (g_next + 1) % WC_REPORTED_MAX;
    if (g_count < WC_REPORTED_MAX) g_count++;
    pthread_mutex_unlock(&g_lock);
}

int wc_reported_seen(const char *key, const char *node, const char *segment, uint64_t offset)
{
    int seen = 0;
    if (!fits(key, node, segment)) return 0;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_count && !seen; i++) {
        const reported *r = &g_ring[i];
        seen = r->offset == offset && strcmp(r->key, key) == 0 &&
               strcmp(r->node, node ? node : "") == 0 &&
               strcmp(r->segment, segment ? segment : "") == 0;
    }
    pthread_mutex_unlock(&g_lock);
    return seen;
}
