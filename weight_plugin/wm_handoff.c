/* wm_handoff.c -- the weight plugin's state handoff for an in-place reload.
 *
 * What one instance of weight_mgmt.so hands to the next (ABI 1.1,
 * store_plugin.h "Hot reload"): the weight_metadata section exactly as a
 * snapshot would hold it (revisions, operations, leases, lineage claims and
 * watermarks, next ids), then the counters that live only in memory and
 * feed the plugin's metrics (so they go on instead of restarting at 0),
 * then the volatile leases (granted while the lease records' gate is
 * closed: in no record and no snapshot, so a reload must carry them or the
 * reads they protect would lose their protection).
 * The lifecycle's working state (jobs, suspects, pressure, cursors) is not
 * handed over: it is rebuilt from the store, as after a change of leader,
 * and the resumed instance re-validates every revision against its replicas
 * (wm_lifecycle_revalidate).
 *
 * Format 2, little-endian: "WMH1", u16 section encver, u64 section length,
 * the section, u32 counter count, that many u64 counters (the order of
 * wm_counters below; an importer takes the ones it knows), u32 volatile
 * lease count, and for each a u32 length and the lease encoded as its
 * WEIGHT_LEASE_UPSERT record would be. Format 1 (no lease part) is still
 * read; a build that reads only format 1 refuses 2, so a reload to it rolls
 * back rather than drop the volatile leases. An importer
 * refuses another format, a section encver newer than it reads, a section
 * its store refuses, and truncated or trailing bytes -- each with a
 * sentence. The self-check saves the imported store again and compares it
 * with the section it was given, byte for byte. */
#include <inttypes.h>
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
    WM_C(p->repairs_started);
    WM_C(p->repairs_succeeded);
    WM_C(p->repairs_failed);
    WM_C(p->repairs_gave_up);
    WM_C(p->repair_bytes_processed);
    WM_C(p->read_misses);
    WM_C(p->access_records);
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
    uint8_t **leases = calloc(p->n_vleases + 1, sizeof(*leases));
    size_t *lease_len = calloc(p->n_vleases + 1, sizeof(*lease_len));
    size_t total = 4 + 2 + 8 + len + 4 + 8 * nc + 4;
    uint8_t *b = NULL;
    if (leases == NULL || lease_len == NULL) {
        rc = SMP_ENOMEM;
        goto free_leases;
    }
    for (size_t i = 0; i < p->n_vleases; i++) {
        rc = wm_encode_lease_upsert(&p->vleases[i].lease, &leases[i], &lease_len[i], why,
                                    sizeof(why));
        if (rc < 0) {
            p->api->log(p->host, SMP_LOG_ERROR, "handoff: volatile lease %" PRIu64 ": %s",
                        p->vleases[i].lease.id, why);
            rc = rc == SMP_ENOMEM ? rc : SMP_EPROTO;
            goto free_leases;
        }
        total += 4 + lease_len[i];
    }
    if ((b = p->api->alloc(total)) == NULL) {
        rc = SMP_ENOMEM;
        goto free_leases;
    }
    memcpy(b, WM_HANDOFF_MAGIC, 4);
    put_le(b + 4, WM_SECTION_ENCVER, 2);
    put_le(b + 6, len, 8);
    if (len > 0) memcpy(b + 14, section, len);
    put_le(b + 14 + len, nc, 4);
    for (size_t i = 0; i < nc; i++) put_le(b + 18 + len + 8 * i, *counters[i], 8);
    size_t off = 18 + len + 8 * nc;
    put_le(b + off, p->n_vleases, 4);
    off += 4;
    for (size_t i = 0; i < p->n_vleases; i++) {
        put_le(b + off, lease_len[i], 4);
        memcpy(b + off + 4, leases[i], lease_len[i]);
        off += 4 + lease_len[i];
    }
    out->format = WM_HANDOFF_FORMAT;
    out->data = b;
    out->len = total;
    rc = SMP_OK;
free_leases:
    for (size_t i = 0; leases != NULL && i < p->n_vleases; i++) free(leases[i]);
    free(leases);
    free(lease_len);
    free(section);
    return rc;
}

/* Take the volatile leases of a format 2 handoff (b: len bytes from its
 * lease count on). A lease whose revision the imported store does not have
 * is dropped: nothing is left for it to protect. */
static int wm_import_vleases(wm_plugin *p, const uint8_t *b, size_t len, char *why, size_t cap)
{
    if (len < 4) {
        snprintf(why, cap, "handoff ends before its volatile lease count");
        return SMP_EPROTO;
    }
    uint64_t n = get_le(b, 4);
    size_t off = 4;
    for (uint64_t i = 0; i < n; i++) {
        if (len - off < 4 || len - off - 4 < get_le(b + off, 4)) {
            snprintf(why, cap, "handoff: volatile lease %" PRIu64 " of %" PRIu64 " is truncated",
                     i, n);
            return SMP_EPROTO;
        }
        size_t l = (size_t)get_le(b + off, 4);
        wm_lease lease;
        wm_identity_buf ids;
        char msg[256];
        if (wm_decode_lease_upsert(b + off + 4, l, &lease, &ids, msg, sizeof(msg)) < 0) {
            snprintf(why, cap, "handoff: volatile lease %" PRIu64 ": %s", i, msg);
            return SMP_EPROTO;
        }
        off += 4 + l;
        const wm_revision *rev = wm_store_get(p->store, &lease.id_of);
        if (rev == NULL) continue;
        int rc = wm_vlease_add(p, &lease, rev->group_key);
        if (rc < 0) return rc;
    }
    if (off != len) {
        snprintf(why, cap, "handoff has %zu bytes after its volatile leases", len - off);
        return SMP_EPROTO;
    }
    return SMP_OK;
}

int wm_handoff_import(wm_plugin *p, const smp_handoff *in, char *why, size_t cap)
{
    const uint8_t *b = in->data;
    uint64_t *counters[WM_MAX_COUNTERS];
    size_t nc = wm_counters(p, counters, WM_MAX_COUNTERS);
    if (in->format != 1 && in->format != WM_HANDOFF_FORMAT) {
        snprintf(why, cap, "handoff format %u is not one this build reads (1, %u)",
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
    if (in->format == 1 ? in->len != 18 + len + 8 * n : n > (in->len - 18 - len) / 8) {
        snprintf(why, cap, "handoff of %zu bytes does not hold %llu counters after the section",
                 in->len, (unsigned long long)n);
        return SMP_EPROTO;
    }
    int rc = wm_store_load(p->store, b + 14, (size_t)len, why, cap);
    if (rc < 0) return rc == SMP_ENOMEM ? rc : SMP_EPROTO;
    if (in->format != 1) {
        size_t at = 18 + (size_t)len + 8 * (size_t)n;
        if ((rc = wm_import_vleases(p, b + at, in->len - at, why, cap)) < 0) return rc;
    }
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
