/* metrics.c -- the master's metric registry and its Prometheus text rendering.
 *
 * A registry is an ordered list of families (registration order); a family
 * holds its kind, name, help text, label names and an ordered list of series
 * (creation order), one per distinct tuple of label values. A histogram
 * family also holds its upper bounds; its series keep one count per bound
 * (not cumulative: an observation lands in one slot), the observations above
 * the last bound implicitly (count minus the slots), the sum in v and the
 * count, and rendering accumulates the slots into Prometheus's cumulative
 * buckets. Rendering walks
 * both lists in order, so /metrics output is stable between scrapes. Names
 * are validated at registration; label values are escaped at rendering (\\,
 * \" and newline). Updates never fail loudly: a series that cannot be
 * allocated is dropped (the counter stays absent) rather than aborting the
 * loop. Everything runs on the loop thread; there are no locks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

typedef struct metric_series {
    char **values;     /* one per label name, copied */
    double v;          /* the value; a histogram's sum */
    uint64_t *buckets; /* histogram: observations per bound (n_bounds), else NULL */
    uint64_t count;    /* histogram: every observation */
} metric_series;

struct smp_metric {
    smp_metric_kind kind;
    char *name;
    char *help;
    char *labels[SMP_METRIC_MAX_LABELS];
    size_t n_labels;
    int histogram;     /* a host histogram (kind is then unused) */
    double *bounds;    /* its upper bounds, increasing */
    size_t n_bounds;
    metric_series **series;
    size_t n_series;
    size_t cap_series;
};

struct host_metrics {
    host_metric **families;
    size_t n;
    size_t cap;
};

static char *metrics_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d != NULL) memcpy(d, s, n);
    return d;
}

/* Prometheus metric names: [a-zA-Z_:][a-zA-Z0-9_:]*. Label names: the same
 * without ':' and not starting with "__" (reserved). */
static int metrics_valid_name(const char *s, int is_label)
{
    if (s == NULL || *s == '\0') return 0;
    if (is_label && s[0] == '_' && s[1] == '_') return 0;
    for (size_t i = 0; s[i] != '\0'; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (!is_label && c == ':') || (i > 0 && c >= '0' && c <= '9');
        if (!ok) return 0;
    }
    return 1;
}

static void metrics_series_free(metric_series *s, size_t n_labels)
{
    if (s == NULL) return;
    if (s->values != NULL)
        for (size_t i = 0; i < n_labels; i++) free(s->values[i]);
    free(s->values);
    free(s->buckets);
    free(s);
}

static void metrics_family_free(host_metric *f)
{
    if (f == NULL) return;
    for (size_t i = 0; i < f->n_series; i++) metrics_series_free(f->series[i], f->n_labels);
    free(f->series);
    for (size_t i = 0; i < f->n_labels; i++) free(f->labels[i]);
    free(f->bounds);
    free(f->name);
    free(f->help);
    free(f);
}

int host_metrics_create(host_metrics **out)
{
    if (out == NULL) return SMP_EINVAL;
    *out = calloc(1, sizeof(**out));
    return *out == NULL ? SMP_ENOMEM : SMP_OK;
}

void host_metrics_destroy(host_metrics *m)
{
    if (m == NULL) return;
    for (size_t i = 0; i < m->n; i++) metrics_family_free(m->families[i]);
    free(m->families);
    free(m);
}

host_metric *host_metrics_find(const host_metrics *m, const char *name)
{
    if (m == NULL || name == NULL) return NULL;
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->families[i]->name, name) == 0) return m->families[i];
    return NULL;
}

/* Validate and copy a family description (a histogram when bounds is not
 * NULL), then append it to the registry. On any failure nothing is added and
 * *out is left untouched. */
static int metrics_register_family(host_metrics *m,
                                   smp_metric_kind kind,
                                   const char *name,
                                   const char *help,
                                   const char *const *label_names,
                                   const double *bounds,
                                   size_t n_bounds,
                                   host_metric **out)
{
    int rc;
    host_metric *f = NULL;
    size_t n_labels = 0;

    if (m == NULL || !metrics_valid_name(name, 0)) return SMP_EINVAL;
    if (bounds == NULL && kind != SMP_METRIC_COUNTER && kind != SMP_METRIC_GAUGE)
        return SMP_EINVAL;
    if (bounds != NULL) {
        if (n_bounds == 0 || n_bounds > HOST_METRIC_MAX_BUCKETS) return SMP_EINVAL;
        for (size_t i = 0; i < n_bounds; i++)
            if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) return SMP_EINVAL;
    }
    if (label_names != NULL) {
        while (label_names[n_labels] != NULL) {
            if (n_labels == SMP_METRIC_MAX_LABELS) return SMP_EINVAL;
            if (!metrics_valid_name(label_names[n_labels], 1)) return SMP_EINVAL;
            if (bounds != NULL && strcmp(label_names[n_labels], "le") == 0) return SMP_EINVAL;
            for (size_t j = 0; j < n_labels; j++)
                if (strcmp(label_names[j], label_names[n_labels]) == 0) return SMP_EINVAL;
            n_labels++;
        }
    }
    if (host_metrics_find(m, name) != NULL) return SMP_EEXIST;

    f = calloc(1, sizeof(*f));
    if (f == NULL) return SMP_ENOMEM;
    f->kind = kind;
    if (bounds != NULL) {
        f->histogram = 1;
        f->bounds = malloc(n_bounds * sizeof(*f->bounds));
        if (f->bounds == NULL) {
            rc = SMP_ENOMEM;
            goto free_family;
        }
        memcpy(f->bounds, bounds, n_bounds * sizeof(*f->bounds));
        f->n_bounds = n_bounds;
    }
    f->name = metrics_strdup(name);
    f->help = metrics_strdup(help != NULL ? help : "");
    if (f->name == NULL || f->help == NULL) {
        rc = SMP_ENOMEM;
        goto free_family;
    }
    for (size_t i = 0; i < n_labels; i++) {
        f->labels[i] = metrics_strdup(label_names[i]);
        if (f->labels[i] == NULL) {
            rc = SMP_ENOMEM;
            goto free_family;
        }
        f->n_labels = i + 1;
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        host_metric **grown = realloc(m->families, cap * sizeof(*grown));
        if (grown == NULL) {
            rc = SMP_ENOMEM;
            goto free_family;
        }
        m->families = grown;
        m->cap = cap;
    }
    m->families[m->n++] = f;
    if (out != NULL) *out = f;
    return SMP_OK;

free_family:
    metrics_family_free(f);
    return rc;
}

int host_metrics_register(host_metrics *m,
                          smp_metric_kind kind,
                          const char *name,
                          const char *help,
                          const char *const *label_names,
                          host_metric **out)
{
    return metrics_register_family(m, kind, name, help, label_names, NULL, 0, out);
}

int host_metrics_register_histogram(host_metrics *m,
                                    const char *name,
                                    const char *help,
                                    const char *const *label_names,
                                    const double *bounds,
                                    size_t n_bounds,
                                    host_metric **out)
{
    if (bounds == NULL) return SMP_EINVAL;
    /* The kind is not rendered for a histogram; GAUGE only fills the field. */
    return metrics_register_family(m, SMP_METRIC_GAUGE, name, help, label_names, bounds,
                                   n_bounds, out);
}

/* Remove f from m and free it (and its series). f not in m: no-op, since a
 * family is never shared between registries. */
void host_metrics_unregister(host_metrics *m, host_metric *f)
{
    if (m == NULL || f == NULL) return;
    for (size_t i = 0; i < m->n; i++) {
        if (m->families[i] != f) continue;
        memmove(&m->families[i], &m->families[i + 1], (m->n - i - 1) * sizeof(*m->families));
        m->n--;
        metrics_family_free(f);
        return;
    }
}

static const char *metrics_value_at(const char *const *values, size_t i)
{
    return values[i] != NULL ? values[i] : "";
}

static metric_series *metrics_series_find(const host_metric *f, const char *const *values)
{
    for (size_t i = 0; i < f->n_series; i++) {
        metric_series *s = f->series[i];
        size_t j = 0;
        while (j < f->n_labels && strcmp(s->values[j], metrics_value_at(values, j)) == 0) j++;
        if (j == f->n_labels) return s;
    }
    return NULL;
}

/* The series of this tuple, created (value 0) when absent. NULL when the
 * tuple is missing for a labelled family, or on allocation failure. */
static metric_series *metrics_series_get(host_metric *f, const char *const *values)
{
    metric_series *s;
    if (f->n_labels > 0 && values == NULL) return NULL;
    s = metrics_series_find(f, values);
    if (s != NULL) return s;

    if (f->n_series == f->cap_series) {
        size_t cap = f->cap_series ? f->cap_series * 2 : 4;
        metric_series **grown = realloc(f->series, cap * sizeof(*grown));
        if (grown == NULL) return NULL;
        f->series = grown;
        f->cap_series = cap;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    if (f->histogram) {
        s->buckets = calloc(f->n_bounds, sizeof(*s->buckets));
        if (s->buckets == NULL) goto free_series;
    }
    if (f->n_labels > 0) {
        s->values = calloc(f->n_labels, sizeof(*s->values));
        if (s->values == NULL) goto free_series;
        for (size_t i = 0; i < f->n_labels; i++) {
            s->values[i] = metrics_strdup(metrics_value_at(values, i));
            if (s->values[i] == NULL) goto free_series;
        }
    }
    f->series[f->n_series++] = s;
    return s;

free_series:
    metrics_series_free(s, f->n_labels);
    return NULL;
}

void host_metric_add(host_metric *f, const char *const *label_values, double v)
{
    metric_series *s;
    if (f == NULL || f->histogram) return;
    s = metrics_series_get(f, label_values);
    if (s != NULL) s->v += v;
}

void host_metric_set(host_metric *f, const char *const *label_values, double v)
{
    metric_series *s;
    if (f == NULL || f->histogram) return;
    s = metrics_series_get(f, label_values);
    if (s != NULL) s->v = v;
}

/* The first bound >= v takes the observation; above the last bound (or NaN)
 * only the count does (the +Inf bucket is count itself). */
void host_metric_observe(host_metric *f, const char *const *label_values, double v)
{
    metric_series *s;
    if (f == NULL || !f->histogram) return;
    s = metrics_series_get(f, label_values);
    if (s == NULL) return;
    for (size_t i = 0; i < f->n_bounds; i++) {
        if (v <= f->bounds[i]) {
            s->buckets[i]++;
            break;
        }
    }
    s->count++;
    s->v += v;
}

void host_metric_touch(host_metric *f, const char *const *label_values)
{
    if (f != NULL) (void)metrics_series_get(f, label_values);
}

void host_metric_histogram_get(const host_metric *f,
                               const char *const *label_values,
                               uint64_t *count,
                               double *sum)
{
    const metric_series *s = NULL;
    if (f != NULL && f->histogram && (f->n_labels == 0 || label_values != NULL))
        s = metrics_series_find(f, label_values);
    if (count != NULL) *count = s != NULL ? s->count : 0;
    if (sum != NULL) *sum = s != NULL ? s->v : 0;
}

double host_metric_value(const host_metric *f, const char *const *label_values)
{
    const metric_series *s;
    if (f == NULL || (f->n_labels > 0 && label_values == NULL)) return 0;
    s = metrics_series_find(f, label_values);
    return s != NULL ? s->v : 0;
}

/* -- Rendering --------------------------------------------------------------- */

typedef struct metrics_buf {
    char *p;
    size_t len;
    size_t cap;
    int failed;
} metrics_buf;

static void buf_reserve(metrics_buf *b, size_t more)
{
    if (b->failed || b->len + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + more + 1) cap *= 2;
    char *grown = realloc(b->p, cap);
    if (grown == NULL) {
        b->failed = 1;
        return;
    }
    b->p = grown;
    b->cap = cap;
}

static void buf_put(metrics_buf *b, const char *s, size_t n)
{
    buf_reserve(b, n);
    if (b->failed) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_puts(metrics_buf *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

/* Append s escaped: backslash and newline always, the double quote only in
 * label values (HELP text leaves quotes alone, per the exposition format). */
static void buf_escaped(metrics_buf *b, const char *s, int quote)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\') buf_put(b, "\\\\", 2);
        else if (*s == '\n') buf_put(b, "\\n", 2);
        else if (quote && *s == '"') buf_put(b, "\\\"", 2);
        else buf_put(b, s, 1);
    }
}

/* The shortest decimal that reads back as v, into out; an integral value
 * below 2^53 in plain digits ("10", not "1e+01"); Prometheus spellings for
 * the non-finite values. */
static void format_value(char out[40], double v)
{
    /* No floor(): host_core does not link libm. */
    if (v > -9007199254740992.0 && v < 9007199254740992.0 && v == (double)(long long)v) {
        snprintf(out, 40, "%.0f", v);
        return;
    }
    if (isnan(v)) {
        snprintf(out, 40, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, 40, "%s", v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, 40, "%.*g", prec, v);
        if (strtod(out, NULL) == v) break;
    }
}

static void buf_value(metrics_buf *b, double v)
{
    char tmp[40];
    format_value(tmp, v);
    buf_puts(b, tmp);
}

/* "{a="x",b="y"}" for series s (NULL: the unlabelled family's implicit
 * series), with le="<le>" last when le is not NULL; nothing at all when
 * there is neither a label nor le. */
static void render_labels(metrics_buf *b, const host_metric *f, const metric_series *s,
                          const char *le)
{
    size_t n = s != NULL ? f->n_labels : 0;
    if (n == 0 && le == NULL) return;
    buf_puts(b, "{");
    for (size_t j = 0; j < n; j++) {
        if (j > 0) buf_puts(b, ",");
        buf_puts(b, f->labels[j]);
        buf_puts(b, "=\"");
        buf_escaped(b, s->values[j], 1);
        buf_puts(b, "\"");
    }
    if (le != NULL) {
        buf_puts(b, n > 0 ? ",le=\"" : "le=\"");
        buf_puts(b, le);
        buf_puts(b, "\"");
    }
    buf_puts(b, "}");
}

/* name + suffix + labels + " " + value + newline. */
static void render_line(metrics_buf *b, const host_metric *f, const char *suffix,
                        const metric_series *s, const char *le, double v)
{
    buf_puts(b, f->name);
    buf_puts(b, suffix);
    render_labels(b, f, s, le);
    buf_puts(b, " ");
    buf_value(b, v);
    buf_puts(b, "\n");
}

/* One histogram series: a cumulative _bucket line per bound, le="+Inf"
 * (the count), _sum and _count. s NULL: the unlabelled family before its
 * first observation (everything 0). */
static void render_histogram_series(metrics_buf *b, const host_metric *f, const metric_series *s)
{
    char le[40];
    uint64_t cum = 0;
    for (size_t i = 0; i < f->n_bounds; i++) {
        if (s != NULL) cum += s->buckets[i];
        format_value(le, f->bounds[i]);
        render_line(b, f, "_bucket", s, le, (double)cum);
    }
    render_line(b, f, "_bucket", s, "+Inf", s != NULL ? (double)s->count : 0);
    render_line(b, f, "_sum", s, NULL, s != NULL ? s->v : 0);
    render_line(b, f, "_count", s, NULL, s != NULL ? (double)s->count : 0);
}

static void render_family(metrics_buf *b, const host_metric *f)
{
    buf_puts(b, "# HELP ");
    buf_puts(b, f->name);
    buf_puts(b, " ");
    buf_escaped(b, f->help, 0);
    buf_puts(b, "\n# TYPE ");
    buf_puts(b, f->name);
    buf_puts(b, f->histogram ? " histogram\n"
                : f->kind == SMP_METRIC_COUNTER ? " counter\n" : " gauge\n");
    if (f->n_labels == 0 && f->n_series == 0) {
        /* An unlabelled family always has its one series, starting at 0. */
        if (f->histogram) render_histogram_series(b, f, NULL);
        else render_line(b, f, "", NULL, NULL, 0);
        return;
    }
    for (size_t i = 0; i < f->n_series; i++) {
        const metric_series *s = f->series[i];
        if (f->histogram) render_histogram_series(b, f, s);
        else render_line(b, f, "", s, NULL, s->v);
    }
}

int host_metrics_render(const host_metrics *m, char **out, size_t *len)
{
    metrics_buf b = {0};
    if (m == NULL || out == NULL) return SMP_EINVAL;
    buf_reserve(&b, 0);
    if (!b.failed) b.p[0] = '\0';
    for (size_t i = 0; i < m->n; i++) render_family(&b, m->families[i]);
    if (b.failed) {
        free(b.p);
        return SMP_ENOMEM;
    }
    *out = b.p;
    if (len != NULL) *len = b.len;
    return SMP_OK;
}
