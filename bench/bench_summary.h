/* bench_summary.h -- the one line each benchmark prints per headline figure,
 * gathered by bench/run_all.sh into the table it prints at the end and writes
 * to build/bench/summary.md.
 *
 * Format (one line, '|'-separated, no '|' inside a field):
 *   summary | WHAT | FIGURE | BASELINE | RATIO | TARGET
 * WHAT names the measurement, FIGURE and BASELINE carry their units, RATIO is
 * figure / baseline as "x1.23" ("-" when there is no baseline), TARGET is what
 * the issue asks for ("-" when nothing is). */
#ifndef WM_BENCH_SUMMARY_H
#define WM_BENCH_SUMMARY_H

#include <stdarg.h>
#include <stdio.h>

/* Print one summary line; ratio < 0 prints "-". figure and baseline come
 * formatted with their units (bench_fmt below). */
static inline void bench_summary(const char *what, const char *figure, const char *baseline,
                                 double ratio, const char *target)
{
    char r[32] = "-";
    if (ratio >= 0) snprintf(r, sizeof(r), "x%.2f", ratio);
    printf("summary | %s | %s | %s | %s | %s\n", what, figure, baseline && baseline[0] ? baseline : "-",
           r, target && target[0] ? target : "-");
    fflush(stdout);
}

/* snprintf into buf and return it, to build a summary field in place. */
static inline const char *bench_fmt(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline const char *bench_fmt(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return buf;
}

#endif /* WM_BENCH_SUMMARY_H */
