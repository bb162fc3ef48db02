/* node_cold_watch.c -- the cold tier's usage, read on a thread of its own
 * (node_cold_watch.h). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "node_cold_watch.h"

struct cold_watch {
    cold_tier *ct;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* signalled at stop (CLOCK_MONOTONIC waits) */
    int stopping;          /* under mu */
    cold_usage last;       /* under mu */
    uint64_t last_ms;      /* when it was read (monotonic), under mu */
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Read the usage (outside the lock: it may take long) and keep it. */
static void read_once(cold_watch *w)
{
    cold_usage u;
    cold_usage_get(w->ct, &u);
    pthread_mutex_lock(&w->mu);
    w->last = u;
    w->last_ms = mono_ms();
    pthread_mutex_unlock(&w->mu);
}

static void *watch_main(void *arg)
{
    cold_watch *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += COLD_WATCH_MS / 1000;
        until.tv_nsec += (long)(COLD_WATCH_MS % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        while (!w->stopping && pthread_cond_timedwait(&w->cv, &w->mu, &until) != ETIMEDOUT) {
        }
        if (w->stopping) break;
        pthread_mutex_unlock(&w->mu);
        read_once(w);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int cold_watch_start(cold_tier *ct, cold_watch **out)
{
    pthread_condattr_t ca;
    cold_watch *w = calloc(1, sizeof(*w));
    *out = NULL;
    if (w == NULL) return SMP_ENOMEM;
    w->ct = ct;
    if (pthread_mutex_init(&w->mu, NULL) != 0) goto free_w;
    if (pthread_condattr_init(&ca) != 0) goto free_mu;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int crc = pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (crc != 0) goto free_mu;
    read_once(w);
    if (pthread_create(&w->th, NULL, watch_main, w) != 0) goto free_cv;
    *out = w;
    return SMP_OK;
free_cv:
    pthread_cond_destroy(&w->cv);
free_mu:
    pthread_mutex_destroy(&w->mu);
free_w:
    free(w);
    return SMP_ENOMEM;
}

void cold_watch_get(cold_watch *w, cold_usage *out, uint64_t *age_ms)
{
    pthread_mutex_lock(&w->mu);
    *out = w->last;
    if (age_ms != NULL) *age_ms = mono_ms() - w->last_ms;
    pthread_mutex_unlock(&w->mu);
}

void cold_watch_stop(cold_watch *w)
{
    if (w == NULL) return;
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
