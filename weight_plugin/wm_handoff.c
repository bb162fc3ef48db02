/* wm_handoff.c -- the weight plugin's state handoff for an in-place reload.
 *
 * What one instance of weight_mgmt.so hands to the next (ABI 1.1,
 * store_plugin.h "Hot reload"): the weight_metadata section exactly as a
 * snapshot would hold it (revisions, operations, leases, lineage claims and
 * watermarks, next ids), then the counters that live only in memory and
 * feed the plugin's metrics (so they go on instead of restarting at 0).
 * The lifecycle's working state (jobs, suspects, pressure, cursors) is not
 * handed over: it is rebuilt from the store, as after a change of leader,
 * and the resumed instance re-validates every revision against its replicas
 * (wm_lifecycle_revalidate).
 *
 * Format 1, little-endian: "WMH1", u16 section encver, u64 section length,
 * the section, u32 counter count, that many u64 counters (the order of
 * wm_counters below; an importer takes the ones it knows). An importer
 * refuses another format, a section encver newer than it reads, a section
 * its store refuses, and truncated or trailing bytes -- each with a
 * sentence. The self-check saves the imported store again and compares it
 * with the section it was given, byte for byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wm_plugin.h"

#define WM_HANDOFF_MAGIC "WMH1"

/* The in-memory counters, in handoff order. */
static size_t wm_counters(wm_plugin *p, uint64_t **out, size_t cap)
{
    size_t n = 0;
#define WM_C(x) do { if (n < cap) out[n] = &(x); n++; } while (0)
    for (int r = 0; r <= SMP_GUARD_REASON_MAX; r++) WM_C(p->guard_skips[r]);
    WM_C(p->leases_expired);
    WM_C(p->op_failures);
    WM_C(p->op_retries);
    for (int r = 0; r < WM_AUTO_REASONS; r++) WM_C(p->auto_triggers[r]);
    WM_C(p->migration_bytes_processed);
    WM_C(p->migrations_completed);
    WM_C(p->migration_ms_total);
    for (int r = 0; r < WM_DEL_REASONS; r++) WM_C(p->records_pruned[r]);
    WM_C(p->imports_expired);
#undef WM_C
    return n;
}

#define WM_MAX_COUNTERS 64

static void put_le(uint8_t *b, uint64_t v, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *b, size_t bytes)
{
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

int wm_handoff_export(wm_plugin *p, smp_handoff *out)
{
    uint8_t *section = NULL;
    size_t len = 0;
    char why[512] = "";
    uint64_t *counters[WM_MAX_COUNTERS];
    size_t nc = wm_counters(p, counters, WM_MAX_COUNTERS);
    int rc = wm_store_save(p->store, &section, &len, why, sizeof(why));
    if (rc < 0) {
        p->api->log(p->host, SMP_LOG_ERROR, "handoff: the store cannot be saved: %s", why);
        return rc == SMP_ENOMEM ? rc : SMP_EPROTO;
    }
    size_t total = 4 + 2 + 8 + len + 4 + 8 * nc;
    uint8_t *b = p->api->alloc(total);
    if (b == NULL) {
        free(section);
        return SMP_ENOMEM;
    }
    memcpy(b, WM_HANDOFF_MAGIC, 4);
    put_le(b + 4, WM_SECTION_ENCVER, 2);
    put_le(b + 6, len, 8);
    if (len > 0) memcpy(b + 14, section, len);
    put_le(b + 14 + len, nc, 4);
    for (size_t i = 0; i < nc; i++) put_le(b + 18 + len + 8 * i, *counters[i], 8);
    free(section);
    out->format = WM_HANDOFF_FORMAT;
    out->data = b;
    out->len = total;
    return SMP_OK;
}

int wm_handoff_import(wm_plugin *p, const smp_handoff *in, char *why, size_t cap)
{
    const uint8_t *b = in->data;
    uint64_t *counters[WM_MAX_COUNTERS];
    size_t nc = wm_counters(p, counters, WM_MAX_COUNTERS);
    if (in->format != WM_HANDOFF_FORMAT) {
        snprintf(why, cap, "handoff format %u is not the one this build reads (%u)",
                 (unsigned)in->format, (unsigned)WM_HANDOFF_FORMAT);
        return SMP_ENOTSUP;
    }
    if (b == NULL || in->len < 18 || memcmp(b, WM_HANDOFF_MAGIC, 4) != 0) {
        snprintf(why, cap, "handoff of %zu bytes does not start with %s", in->len, WM_HANDOFF_MAGIC);
        return SMP_EPROTO;
    }
    uint16_t encver = (uint16_t)get_le(b + 4, 2);
    uint64_t len = get_le(b + 6, 8);
    if (encver > WM_SECTION_ENCVER) {
        snprintf(why, cap, "section %s has encver %u; this build reads up to %u", WM_SECTION_NAME,
                 (unsigned)encver, (unsigned)WM_SECTION_ENCVER);
        return SMP_ENOTSUP;
    }
    if (len > in->len - 18) {
        snprintf(why, cap, "handoff of %zu bytes is truncated (section of %llu bytes)", in->len,
                 (unsigned long long)len);
        return SMP_EPROTO;
    }
    uint64_t n = get_le(b + 14 + len, 4);
    if (in->len != 18 + len + 8 * n) {
        snprintf(why, cap, "handoff of %zu bytes does not hold %llu counters after the section",
                 in->len, (unsigned long long)n);
        return SMP_EPROTO;
    }
    int rc = wm_store_load(p->store, b + 14, (size_t)len, why, cap);
    if (rc < 0) return rc == SMP_ENOMEM ? rc : SMP_EPROTO;
    for (size_t i = 0; i < nc && i < n; i++) *counters[i] = get_le(b + 18 + len + 8 * i, 8);
    free(p->handoff_section);
    p->handoff_section = malloc(len ? len : 1);
    if (p->handoff_section == NULL) return SMP_ENOMEM;
    if (len > 0) memcpy(p->handoff_section, b + 14, len);
    p->handoff_len = (size_t)len;
    wm_metrics_refresh(p);
    return SMP_OK;
}

int wm_handoff_self_check(wm_plugin *p, char *why, size_t cap)
{
    uint8_t *again = NULL;
    size_t len = 0;
    int rc = wm_store_save(p->store, &again, &len, why, cap);
    if (rc < 0) return rc == SMP_ENOMEM ? rc : SMP_EPROTO;
    if (p->handoff_section == NULL || len != p->handoff_len ||
        (len > 0 && memcmp(again, p->handoff_section, len) != 0)) {
        snprintf(why, cap, "the imported store saves to %zu bytes that differ from the %zu "
                 "handed over", len, p->handoff_len);
        rc = SMP_EPROTO;
    }
    free(again);
    free(p->handoff_section);
    p->handoff_section = NULL;
    p->handoff_len = 0;
    return rc;
}
