/* weightctl_output.c -- how weightctl answers: sizes for people (KiB, MiB,
 * ...), the progress bar of put and get, an identity as text, and the JSON
 * objects of --json (identities, operations, revision metadata) with the
 * text form of an operation. */
#include <ctype.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weightctl.h"
#include "wm_bytes.h"

double wctl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void wctl_human(double v, char *out, size_t cap)
{
    wm_human_bytes(v, out, cap);
}

void wctl_size_text(double v, int raw, char *out, size_t cap)
{
    if (raw) snprintf(out, cap, "%.0f bytes", v);
    else wctl_human(v, out, cap);
}

void wctl_sizes_text(const char *msg, int raw, char *out, size_t cap)
{
    size_t n = 0;
    char prev = ' ';
    if (cap == 0) return;
    while (*msg && n + 1 < cap) {
        const char *d = msg;
        int word_start = !(isalnum((unsigned char)prev) || prev == '_' || prev == '.');
        while (word_start && isdigit((unsigned char)*d)) d++;
        if (d > msg && !raw && strncmp(d, " bytes", 6) == 0 && strtod(msg, NULL) >= 1024) {
            char h[32];
            wctl_human(strtod(msg, NULL), h, sizeof h);
            int w = snprintf(out + n, cap - n, "%s", h);
            n = w > 0 && (size_t)w < cap - n ? n + (size_t)w : cap - 1;
            msg = d + 6;
            prev = 's';
            continue;
        }
        do {
            prev = *msg;
            out[n++] = *msg++;
        } while (msg < d && n + 1 < cap);
    }
    out[n] = '\0';
}

void wctl_progress_init(const ctl *x, wctl_progress *p, const char *label)
{
    p->label = label;
    p->t0 = wctl_now();
    p->last_step = -1;
    p->drawn = 0;
    if (x->progress == WCTL_PROGRESS_PLAIN) p->on = 2;
    else if (x->progress == WCTL_PROGRESS_NONE) p->on = 0;
    else p->on = isatty(2) && !x->json;
}

/* --progress plain: one line for each 5 % step crossed since the last call. */
static void progress_plain(wctl_progress *p, uint64_t done, uint64_t total, double rate)
{
    int step = total ? (int)((double)done * 20.0 / (double)total) : (done == total ? 20 : 0);
    char t[32], r[32];
    if (step > 20) step = 20;
    wctl_human((double)total, t, sizeof t);
    wctl_human(rate, r, sizeof r);
    for (int s = p->last_step + 1; s <= step; s++)
        fprintf(stderr, "%s: %3d%% of %s (%s/s)\n", p->label, s * 5, t, r);
    if (step > p->last_step) p->last_step = step;
}

void wctl_progress_cb(void *ctx, uint64_t done, uint64_t total)
{
    wctl_progress *p = ctx;
    char d[32], t[32], r[32];
    if (!p->on) return;
    double el = wctl_now() - p->t0;
    double rate = el > 0 ? (double)done / el : 0;
    if (p->on == 2) {
        progress_plain(p, done, total, rate);
        return;
    }
    int width = 30, fill = total ? (int)((double)width * (double)done / (double)total) : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '-';
    bar[width] = '\0';
    wctl_human((double)done, d, sizeof d);
    wctl_human((double)total, t, sizeof t);
    wctl_human(rate, r, sizeof r);
    double eta = rate > 0 && total > done ? (double)(total - done) / rate : 0;
    fprintf(stderr, "\r%s [%s] %s / %s  %s/s  ETA %02d:%02d\x1b[K", p->label, bar, d, t, r,
            (int)(eta / 60), (int)eta % 60);
    p->drawn = 1;
}

void wctl_progress_end(wctl_progress *p)
{
    if (p->on == 1 && p->drawn) fputc('\n', stderr);
}

void wctl_id_text(const weight_identity *id, char *out, size_t cap)
{
    if (weight_identity_format(id, out, cap) < 0) snprintf(out, cap, "(identity too long)");
}


/* -- JSON ------------------------------------------------------------------ */

void wctl_json_hex(const uint8_t *b, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
    putchar('"');
}

void wctl_json_identity(const weight_identity *id)
{
    char text[2048];
    wctl_id_text(id, text, sizeof text);
    printf("{\"id\":");
    wctl_json_str(text);
    printf(",\"tenant\":");
    wctl_json_str(id->tenant_id);
    printf(",\"namespace\":");
    wctl_json_str(id->namespace_id);
    printf(",\"resource\":");
    wctl_json_str(id->resource_id);
    printf(",\"revision\":");
    wctl_json_str(id->revision);
    printf(",\"generation\":%" PRIu64 "}", id->generation);
}

void wctl_json_operation(const weight_operation *op)
{
    printf("{\"id\":%" PRIu64 ",\"identity\":", op->id);
    wctl_json_identity(&op->identity);
    printf(",\"kind\":\"%s\",\"state\":\"%s\",\"target\":\"%s\",\"target_hot_ratio\":%g,"
           "\"members_done\":%" PRIu64 ",\"members_total\":%" PRIu64 ",\"bytes_done\":%" PRIu64
           ",\"bytes_total\":%" PRIu64 ",\"attempts\":%u,\"error\":",
           weight_operation_kind_name(op->kind), weight_operation_state_name(op->state),
           weight_residency_name(op->target), op->target_hot_ratio, op->members_done,
           op->members_total, op->bytes_done, op->bytes_total, op->attempts);
    wctl_json_str(op->error);
    putchar('}');
}

void wctl_json_metadata(const weight_metadata *m, const weight_operation *op)
{
    wctl_json_metadata_more(m, op, NULL);
}

void wctl_json_metadata_more(const weight_metadata *m, const weight_operation *op,
                             const weight_metadata_more *more)
{
    printf("{\"identity\":");
    wctl_json_identity(&m->identity);
    printf(",\"availability\":\"%s\",\"residency\":\"%s\",\"observed_hot_ratio\":%g,"
           "\"policy\":{\"preferred\":\"%s\",\"mixed_hot_ratio\":%g,\"mode\":\"%s\"},"
           "\"metadata_generation\":%" PRIu64 ",\"operation_id\":%" PRIu64
           ",\"logical_bytes\":%" PRIu64 ",\"payload_count\":%" PRIu64
           ",\"affinity_count\":%" PRIu64 ",\"active_leases\":%u,\"manifest_key\":",
           weight_availability_name(m->availability), weight_residency_name(m->residency),
           m->observed_hot_ratio, weight_residency_name(m->policy.preferred),
           m->policy.mixed_hot_ratio, weight_mode_name(m->policy.mode), m->metadata_generation,
           m->operation_id, m->logical_bytes, m->payload_count, m->affinity_count,
           m->active_leases);
    wctl_json_str(m->manifest_key);
    printf(",\"manifest_sha256\":");
    wctl_json_hex(m->manifest_sha256, 32);
    printf(",\"created_ms\":%" PRIu64 ",\"updated_ms\":%" PRIu64 ",\"last_access_ms\":%" PRIu64,
           m->created_ms, m->updated_ms, m->last_access_ms);
    if (more && more->degraded_from != WEIGHT_RES_UNKNOWN)
        printf(",\"degraded_from\":{\"residency\":\"%s\",\"hot_ratio\":%g}",
               weight_residency_name(more->degraded_from), more->degraded_from_hot_ratio);
    if (op && op->id) {
        printf(",\"operation\":");
        wctl_json_operation(op);
    }
    putchar('}');
}

void wctl_print_operation(const weight_operation *op)
{
    char text[2048];
    wctl_id_text(&op->identity, text, sizeof text);
    printf("operation   %" PRIu64 " %s %s", op->id, weight_operation_kind_name(op->kind),
           weight_operation_state_name(op->state));
    if (op->kind == 1) printf(" -> %s", weight_residency_name(op->target));
    if (op->target == WEIGHT_RES_MIXED) printf(" (ratio %.3f)", op->target_hot_ratio);
    printf("\n  revision  %s\n", text);
    printf("  progress  %" PRIu64 "/%" PRIu64 " members, %" PRIu64 "/%" PRIu64
           " bytes, %u attempt(s)\n",
           op->members_done, op->members_total, op->bytes_done, op->bytes_total, op->attempts);
    if (op->error[0]) printf("  error     %s\n", op->error);
}

/* Show an operation (a JSON line with --json, else text) and return the
 * exit code it makes: 1 when it FAILED (state 3), else 0. */
int wctl_show_operation(ctl *x, const weight_operation *op)
{
    if (x->json) {
        wctl_json_operation(op);
        putchar('\n');
    } else {
        wctl_print_operation(op);
    }
    return op->state == 3 ? 1 : 0;
}
