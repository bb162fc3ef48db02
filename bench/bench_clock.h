/* bench_clock.h -- the clocks the benchmarks read: the wall clock a rate is
 * taken on, and the CPU time of this process or thread set beside it.
 * Header-only (static inline), like bench_summary.h. */
#ifndef BENCH_CLOCK_H
#define BENCH_CLOCK_H

#include <sys/resource.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* User plus system CPU seconds of who: RUSAGE_SELF (this process, every
 * thread) or RUSAGE_THREAD (the calling thread). */
static inline double bench_rusage_s(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

#endif
