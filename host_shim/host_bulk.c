/* host_bulk.c -- large buffers and index tables in mappings of their own
 * (see host_bulk.h). */
#include "host_bulk.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

void *host_bulk_alloc(size_t len)
{
    if (len == 0) return NULL;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void *host_bulk_alloc_huge(size_t len)
{
    void *p = host_bulk_alloc(len);
#ifdef MADV_HUGEPAGE
    if (p != NULL) (void)madvise(p, len, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
#endif
    return p;
}

size_t host_bulk_ready(void *base, size_t ready, size_t upto, size_t len)
{
    if (upto <= ready) return ready;
    /* a multiple of the window: the page boundary madvise asks for */
    size_t to = (upto + HOST_BULK_AHEAD - 1) / HOST_BULK_AHEAD * HOST_BULK_AHEAD;
    if (to > len) to = len;
#ifdef MADV_POPULATE_WRITE
    (void)madvise((char *)base + ready, to - ready, MADV_POPULATE_WRITE);
#else
    (void)base;
#endif
    return to;
}

struct host_bulk_feed {
    char *base;
    size_t len;
    size_t page;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t more;  /* the thread waits: want moved on, or stop */
    pthread_cond_t moved; /* the filler waits: ready moved on */
    size_t ready;         /* [0, ready) made ready (under mu) */
    size_t want;          /* the filler's last upto (under mu) */
    int stop;             /* under mu */
};

/* Map [p, p + n) and touch a byte of each page (from user space: see the
 * header). The filler owns none of it yet: nothing races. */
static void bulk_feed_touch(char *p, size_t n, size_t page)
{
#ifdef MADV_POPULATE_WRITE
    (void)madvise(p, n, MADV_POPULATE_WRITE);
#endif
    for (size_t at = 0; at < n; at += page) (void)*(volatile char *)(p + at);
}

/* The feed's thread: a window at a time, while it is not HOST_BULK_FEED_LEAD
 * ahead of the filler, until the buffer's end or a stop. */
static void *bulk_feed_run(void *arg)
{
    host_bulk_feed *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stop && f->ready < f->len) {
        if (f->ready >= f->want + HOST_BULK_FEED_LEAD) {
            pthread_cond_wait(&f->more, &f->mu);
            continue;
        }
        size_t from = f->ready;
        size_t to = f->len - from > HOST_BULK_AHEAD ? from + HOST_BULK_AHEAD : f->len;
        pthread_mutex_unlock(&f->mu);
        bulk_feed_touch(f->base + from, to - from, f->page);
        pthread_mutex_lock(&f->mu);
        f->ready = to;
        pthread_cond_signal(&f->moved);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

host_bulk_feed *host_bulk_feed_start(void *base, size_t len)
{
    int rc;
    host_bulk_feed *f = calloc(1, sizeof(*f));
    if (f == NULL) return NULL;
    f->base = base;
    f->len = len;
    f->page = (size_t)sysconf(_SC_PAGESIZE);
    if ((rc = pthread_mutex_init(&f->mu, NULL)) != 0) goto free_feed;
    if ((rc = pthread_cond_init(&f->more, NULL)) != 0) goto destroy_mu;
    if ((rc = pthread_cond_init(&f->moved, NULL)) != 0) goto destroy_more;
    if ((rc = pthread_create(&f->thread, NULL, bulk_feed_run, f)) != 0) goto destroy_moved;
    return f;
destroy_moved:
    pthread_cond_destroy(&f->moved);
destroy_more:
    pthread_cond_destroy(&f->more);
destroy_mu:
    pthread_mutex_destroy(&f->mu);
free_feed:
    free(f);
    errno = rc;
    return NULL;
}

size_t host_bulk_feed_wait(host_bulk_feed *f, size_t upto)
{
    if (upto > f->len) upto = f->len; /* past the end: the whole buffer */
    pthread_mutex_lock(&f->mu);
    if (upto > f->want) {
        f->want = upto;
        pthread_cond_signal(&f->more);
    }
    while (f->ready < upto) pthread_cond_wait(&f->moved, &f->mu);
    /* Back at half the lead: the thread always has room to go on. */
    size_t limit = f->ready - upto > HOST_BULK_FEED_LEAD / 2 ? upto + HOST_BULK_FEED_LEAD / 2
                                                             : f->ready;
    pthread_mutex_unlock(&f->mu);
    return limit;
}

void host_bulk_feed_stop(host_bulk_feed *f)
{
    if (f == NULL) return;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_signal(&f->more);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    pthread_cond_destroy(&f->moved);
    pthread_cond_destroy(&f->more);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

void host_bulk_free(void *p, size_t len)
{
    if (p != NULL) (void)munmap(p, len);
}
