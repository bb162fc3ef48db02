/* metrics.h -- counters, gauges and histograms with labels, rendered as
 * Prometheus text.
 *
 * One host_metrics registry holds every metric family of the master: the
 * host's own and those plugins register through the ABI. A family has a
 * kind, a name, a help line and up to SMP_METRIC_MAX_LABELS label names; each
 * distinct tuple of label values is a series. Histograms are host-only (the
 * ABI offers counters and gauges): a histogram family has fixed upper bounds
 * and renders each series as cumulative _bucket{le=...} lines ending with
 * le="+Inf", then _sum and _count. Updates and rendering happen on the loop
 * thread only (no locks). */
#ifndef HOST_METRICS_H
#define HOST_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"

typedef struct host_metrics host_metrics;
typedef struct smp_metric host_metric; /* a family */

int host_metrics_create(host_metrics **out);
void host_metrics_destroy(host_metrics *m);

/* Register a family. label_names is NULL-terminated (or NULL). Returns
 * SMP_EEXIST for a duplicate name, SMP_EINVAL for a bad name or too many
 * labels. The strings are copied. */
int host_metrics_register(host_metrics *m,
                          smp_metric_kind kind,
                          const char *name,
                          const char *help,
                          const char *const *label_names,
                          host_metric **out);

/* Most upper bounds a histogram family may have (+Inf not counted). */
#define HOST_METRIC_MAX_BUCKETS 32

/* Register a histogram family: like host_metrics_register, plus its upper
 * bounds (bounds[0..n_bounds), finite and strictly increasing, 1 ..
 * HOST_METRIC_MAX_BUCKETS of them; the +Inf bucket is implicit). A label
 * named "le" is refused (the buckets use it). Returns SMP_OK, SMP_EEXIST,
 * SMP_EINVAL or SMP_ENOMEM; the bounds are copied. host_metric_add and
 * host_metric_set on a histogram do nothing: it only takes observations. */
int host_metrics_register_histogram(host_metrics *m,
                                    const char *name,
                                    const char *help,
                                    const char *const *label_names,
                                    const double *bounds,
                                    size_t n_bounds,
                                    host_metric **out);

/* Record one observation v in a histogram series: it counts in the first
 * bucket whose bound is >= v (and so in every later cumulative bucket),
 * and adds to _sum and _count. A counter or gauge family: no-op. */
void host_metric_observe(host_metric *f, const char *const *label_values, double v);

/* Create the series of this tuple if it does not exist (a counter or gauge
 * at 0, a histogram with no observations), so it is exported before its
 * first update. */
void host_metric_touch(host_metric *f, const char *const *label_values);

/* _count and _sum of a histogram series (0 and 0 when it does not exist or
 * f is not a histogram). For tests. */
void host_metric_histogram_get(const host_metric *f,
                               const char *const *label_values,
                               uint64_t *count,
                               double *sum);

/* Remove a family (used when a plugin is unloaded). */
void host_metrics_unregister(host_metrics *m, host_metric *f);

/* Add to / set a series; label_values has one entry per label name. */
void host_metric_add(host_metric *f, const char *const *label_values, double v);
void host_metric_set(host_metric *f, const char *const *label_values, double v);

/* Current value of a series (a histogram's: its sum; 0 when it does not
 * exist). For tests. */
double host_metric_value(const host_metric *f, const char *const *label_values);
host_metric *host_metrics_find(const host_metrics *m, const char *name);

/* Render every family in Prometheus text exposition format into a malloc'd
 * NUL-terminated buffer (*out, caller frees). Returns 0 or SMP_ENOMEM. */
int host_metrics_render(const host_metrics *m, char **out, size_t *len);

#endif /* HOST_METRICS_H */
