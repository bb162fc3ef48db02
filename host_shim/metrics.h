/* metrics.h -- counters and gauges with labels, rendered as Prometheus text.
 *
 * One host_metrics registry holds every metric family of the master: the
 * host's own and those plugins register through the ABI. A family has a
 * kind, a name, a help line and up to SMP_METRIC_MAX_LABELS label names; each
 * distinct tuple of label values is a series. Updates and rendering happen on
 * the loop thread only (no locks). */
#ifndef HOST_METRICS_H
#define HOST_METRICS_H

#include <stddef.h>

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

/* Remove a family (used when a plugin is unloaded). */
void host_metrics_unregister(host_metrics *m, host_metric *f);

/* Add to / set a series; label_values has one entry per label name. */
void host_metric_add(host_metric *f, const char *const *label_values, double v);
void host_metric_set(host_metric *f, const char *const *label_values, double v);

/* Current value of a series (0 when it does not exist). For tests. */
double host_metric_value(const host_metric *f, const char *const *label_values);
host_metric *host_metrics_find(const host_metrics *m, const char *name);

/* Render every family in Prometheus text exposition format into a malloc'd
 * NUL-terminated buffer (*out, caller frees). Returns 0 or SMP_ENOMEM. */
int host_metrics_render(const host_metrics *m, char **out, size_t *len);

#endif /* HOST_METRICS_H */
