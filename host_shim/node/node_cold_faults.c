/* node_cold_faults.c -- the cold files a node's readers found corrupt
 * (node_cold_faults.h): a small locked list of names. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "node_cold_faults.h"

struct cold_faults {
    pthread_mutex_t lock;
    size_t n;
    char names[COLD_FAULTS_MAX][COLD_NAME_MAX];
};

cold_faults *cold_faults_new(void)
{
    cold_faults *f = calloc(1, sizeof(*f));
    if (f != NULL && pthread_mutex_init(&f->lock, NULL) != 0) {
        free(f);
        return NULL;
    }
    return f;
}

void cold_faults_free(cold_faults *f)
{
    if (f == NULL) return;
    pthread_mutex_destroy(&f->lock);
    free(f);
}

int cold_faults_note(cold_faults *f, const char *name)
{
    int added = 0;
    if (f == NULL || name == NULL || strlen(name) >= COLD_NAME_MAX) return 0;
    pthread_mutex_lock(&f->lock);
    size_t i = 0;
    while (i < f->n && strcmp(f->names[i], name) != 0) i++;
    if (i == f->n && f->n < COLD_FAULTS_MAX) {
        strcpy(f->names[f->n++], name); /* length checked above */
        added = 1;
    }
    pthread_mutex_unlock(&f->lock);
    return added;
}

size_t cold_faults_take(cold_faults *f, char out[][COLD_NAME_MAX], size_t max)
{
    if (f == NULL || out == NULL) return 0;
    pthread_mutex_lock(&f->lock);
    size_t k = f->n < max ? f->n : max;
    memcpy(out, f->names, k * sizeof(f->names[0]));
    memmove(f->names, f->names + k, (f->n - k) * sizeof(f->names[0]));
    f->n -= k;
    pthread_mutex_unlock(&f->lock);
    return k;
}
