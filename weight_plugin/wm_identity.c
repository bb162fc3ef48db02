/* wm_identity.c -- the value contracts of weight_management.h.
 *
 * Everything here is a pure function over the plugin's plain values: the
 * error names, validation of identity strings and lineages, the canonical
 * store keys (percent-encoded components, strict decoding back), the enum
 * names used in configuration, logs and the wire, the storage policy with its
 * precedence, and the affinity summary with the digests that seal a
 * revision. No function calls the host; a bad value is reported with a code
 * and, where a caller shows it to an operator, a sentence naming it. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "utf8_valid.h"
#include "weight_management.h"

const char *wm_error_name(int rc)
{
    switch (rc) {
    case WM_OK: return "OK";
    case WM_EINVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case WM_ENOT_FOUND: return "NOT_FOUND";
    case WM_ENOT_READY: return "NOT_READY";
    case WM_ECONFLICT: return "CONFLICT";
    case WM_ESTALE_GENERATION: return "STALE_GENERATION";
    case WM_EBUSY: return "BUSY";
    case WM_ELEASE_EXPIRED: return "LEASE_EXPIRED";
    case WM_EDURABILITY_FAILED: return "DURABILITY_FAILED";
    case WM_EPOLICY_UNSATISFIABLE: return "POLICY_UNSATISFIABLE";
    default: return smp_strerror(rc);
    }
}

int wm_fail(int rc, char *msg, size_t cap, const char *fmt, ...)
{
    if (msg != NULL && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Identity strings                                                          */
/* ------------------------------------------------------------------------ */

int wm_component_check(const char *s, size_t len)
{
    if (s == NULL || len == 0 || len > WM_ID_COMPONENT_MAX) return WM_EINVALID_ARGUMENT;
    if (memchr(s, '\0', len) != NULL) return WM_EINVALID_ARGUMENT;
    if (!utf8_valid((const unsigned char *)s, len)) return WM_EINVALID_ARGUMENT;
    return WM_OK;
}

int wm_text_check(const char *s, size_t len)
{
    if (len == 0) return WM_OK;
    if (s == NULL || memchr(s, '\0', len) != NULL) return WM_EINVALID_ARGUMENT;
    return utf8_valid((const unsigned char *)s, len) ? WM_OK : WM_EINVALID_ARGUMENT;
}

/* RFC 3986 unreserved bytes, the ones a key component keeps literally
 * (A-Z a-z 0-9 - . _ ~), as a bit per ASCII byte. */
static const uint64_t wm_unreserved_bits[2] = {
    0x03ff600000000000ull, /* '-' '.' '0'-'9' */
    0x47fffffe87fffffeull  /* 'A'-'Z' '_' 'a'-'z' '~' */
};

static int wm_unreserved(unsigned char c)
{
    return c < 0x80 && (wm_unreserved_bits[c >> 6] >> (c & 63)) & 1;
}

/* Length of s[0..len) once percent-encoded: an unreserved byte stays one
 * byte, any other (each byte of a multi-byte character too) becomes three. */
static size_t wm_pct_len(const unsigned char *s, size_t len)
{
    size_t n = len;
    for (size_t i = 0; i < len; i++) n += wm_unreserved(s[i]) ? 0 : 2;
    return n;
}

/* Check one member of len bytes (the caller's strnlen, at most
 * WM_ID_COMPONENT_MAX + 1: the buffer may hold no terminator at all when it
 * came from an unchecked source). */
static int wm_field_check(const char *field, size_t len, const char *name, char *msg, size_t cap)
{
    if (field == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "%s is missing", name);
    if (len == 0) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "%s is empty", name);
    if (len > WM_ID_COMPONENT_MAX)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "%s is longer than %d bytes", name,
                       WM_ID_COMPONENT_MAX);
    if (!utf8_valid((const unsigned char *)field, len))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "%s is not valid UTF-8", name);
    return WM_OK;
}

/* The four strings of an identity or lineage, of the lengths len (NULL:
 * taken here, each at most WM_ID_COMPONENT_MAX + 1), each checked in
 * order, then the longest key of any generation: "weights/" + 4 encoded
 * components with their separators + "/" + 20 digits + "/payload/" + 20
 * digits. The encoded lengths are counted only when three bytes for every
 * byte could pass the limit (a component of 256 bytes of '@' is 768). */
static int wm_strings_check(const char *const str[4], const size_t *len, char *msg, size_t cap)
{
    static const char *const names[4] = {"tenant_id", "namespace", "resource_id", "revision"};
    size_t n[4], raw = 0, longest = strlen(WM_KEY_PREFIX) + 4 + 1 + 20 + strlen("/payload/") + 20;
    for (int i = 0; i < 4; i++) {
        n[i] = len != NULL ? len[i] : str[i] != NULL ? strnlen(str[i], WM_ID_COMPONENT_MAX + 1) : 0;
        int rc = wm_field_check(str[i], n[i], names[i], msg, cap);
        if (rc < 0) return rc;
        raw += n[i];
    }
    if (longest + 3 * raw <= WM_KEY_MAX) return WM_OK;
    for (int i = 0; i < 4; i++) longest += wm_pct_len((const unsigned char *)str[i], n[i]);
    if (longest > WM_KEY_MAX)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "identity encodes to keys of up to %zu bytes, above the %d-byte key limit",
                       longest, WM_KEY_MAX);
    return WM_OK;
}

int wm_lineage_check(const wm_lineage *lin, char *msg, size_t cap)
{
    if (lin == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "lineage is missing");
    const char *const str[4] = {lin->tenant_id, lin->ns, lin->resource_id, lin->revision};
    return wm_strings_check(str, NULL, msg, cap);
}

int wm_identity_check(const wm_identity *id, char *msg, size_t cap)
{
    return wm_identity_check_len(id, NULL, msg, cap);
}

int wm_identity_check_len(const wm_identity *id, const size_t len[4], char *msg, size_t cap)
{
    if (id == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "identity is missing");
    const char *const str[4] = {id->tenant_id, id->ns, id->resource_id, id->revision};
    return wm_strings_check(str, len, msg, cap);
}

/* Copy one string into a member buffer after checking it. */
static int wm_field_set(char *dst, const char *src)
{
    if (src == NULL) return WM_EINVALID_ARGUMENT;
    size_t len = strnlen(src, WM_ID_COMPONENT_MAX + 1);
    if (wm_component_check(src, len) < 0) return WM_EINVALID_ARGUMENT;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return WM_OK;
}

/* Point b->id's strings at b's own buffers. */
static void wm_identity_buf_bind(wm_identity_buf *b)
{
    b->id.tenant_id = b->s[0];
    b->id.ns = b->s[1];
    b->id.resource_id = b->s[2];
    b->id.revision = b->s[3];
}

int wm_identity_set(wm_identity_buf *out,
                    const char *tenant_id,
                    const char *ns,
                    const char *resource_id,
                    const char *revision,
                    uint64_t weight_generation)
{
    wm_identity_buf b;
    if (out == NULL || wm_field_set(b.s[0], tenant_id) < 0 || wm_field_set(b.s[1], ns) < 0 ||
        wm_field_set(b.s[2], resource_id) < 0 || wm_field_set(b.s[3], revision) < 0)
        return WM_EINVALID_ARGUMENT;
    wm_identity_buf_bind(&b);
    b.id.weight_generation = weight_generation;
    if (wm_identity_check(&b.id, NULL, 0) < 0) return WM_EINVALID_ARGUMENT;
    wm_identity_buf_set(out, &b.id);
    return WM_OK;
}

/* Copy src (NULL: empty) into dst of WM_ID_COMPONENT_MAX + 1 bytes, cut.
 * src may be dst itself. */
static void wm_component_copy(char *dst, const char *src)
{
    size_t len = src != NULL ? strnlen(src, WM_ID_COMPONENT_MAX) : 0;
    if (len > 0) memmove(dst, src, len);
    dst[len] = '\0';
}

void wm_identity_buf_set(wm_identity_buf *b, const wm_identity *id)
{
    uint64_t gen = id->weight_generation;
    const char *src[4] = {id->tenant_id, id->ns, id->resource_id, id->revision};
    for (int i = 0; i < 4; i++) wm_component_copy(b->s[i], src[i]);
    wm_identity_buf_bind(b);
    b->id.weight_generation = gen;
}

size_t wm_identity_packed_len(const wm_identity *id)
{
    const char *src[4] = {id->tenant_id, id->ns, id->resource_id, id->revision};
    size_t n = 0;
    for (int i = 0; i < 4; i++) n += (src[i] != NULL ? strlen(src[i]) : 0) + 1;
    return n;
}

char *wm_identity_pack(const wm_identity *id, char *dst, wm_identity *out)
{
    const char *src[4] = {id->tenant_id, id->ns, id->resource_id, id->revision};
    const char *at[4];
    uint64_t gen = id->weight_generation;
    for (int i = 0; i < 4; i++) {
        size_t len = src[i] != NULL ? strlen(src[i]) : 0;
        if (len > 0) memmove(dst, src[i], len);
        dst[len] = '\0';
        at[i] = dst;
        dst += len + 1;
    }
    out->tenant_id = at[0];
    out->ns = at[1];
    out->resource_id = at[2];
    out->revision = at[3];
    out->weight_generation = gen;
    return dst;
}

void wm_identity_lineage(const wm_identity *id, wm_lineage *out)
{
    wm_component_copy(out->tenant_id, id->tenant_id);
    wm_component_copy(out->ns, id->ns);
    wm_component_copy(out->resource_id, id->resource_id);
    wm_component_copy(out->revision, id->revision);
}

void wm_lineage_identity(const wm_lineage *lin, uint64_t generation, wm_identity *out)
{
    out->tenant_id = lin->tenant_id;
    out->ns = lin->ns;
    out->resource_id = lin->resource_id;
    out->revision = lin->revision;
    out->weight_generation = generation;
}

void wm_lineage_entry_bind(wm_lineage_entry *e)
{
    if (!e->has_claim) return;
    wm_lineage_identity(&e->lineage, e->claim.base.weight_generation, &e->claim.base);
    wm_lineage_identity(&e->lineage, e->claim.target.weight_generation, &e->claim.target);
}

static int wm_strings_cmp(const char *const a[4], const char *const b[4])
{
    for (int i = 0; i < 4; i++) {
        int c = strncmp(a[i] != NULL ? a[i] : "", b[i] != NULL ? b[i] : "",
                        WM_ID_COMPONENT_MAX + 1);
        if (c != 0) return c < 0 ? -1 : 1;
    }
    return 0;
}

int wm_lineage_cmp(const wm_lineage *a, const wm_lineage *b)
{
    const char *const sa[4] = {a->tenant_id, a->ns, a->resource_id, a->revision};
    const char *const sb[4] = {b->tenant_id, b->ns, b->resource_id, b->revision};
    return wm_strings_cmp(sa, sb);
}

int wm_identity_cmp(const wm_identity *a, const wm_identity *b)
{
    const char *const sa[4] = {a->tenant_id, a->ns, a->resource_id, a->revision};
    const char *const sb[4] = {b->tenant_id, b->ns, b->resource_id, b->revision};
    int c = wm_strings_cmp(sa, sb);
    if (c != 0) return c;
    if (a->weight_generation != b->weight_generation)
        return a->weight_generation < b->weight_generation ? -1 : 1;
    return 0;
}

int wm_identity_in_lineage(const wm_identity *id, const wm_lineage *lin)
{
    const char *const sa[4] = {id->tenant_id, id->ns, id->resource_id, id->revision};
    const char *const sb[4] = {lin->tenant_id, lin->ns, lin->resource_id, lin->revision};
    return wm_strings_cmp(sa, sb) == 0;
}

/* ------------------------------------------------------------------------ */
/* Percent-encoding and canonical keys                                       */
/* ------------------------------------------------------------------------ */

int wm_pct_encode(const char *in, size_t len, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    if (in == NULL || out == NULL || cap == 0) return WM_EINVALID_ARGUMENT;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (wm_unreserved(c)) {
            if (o + 1 >= cap) return WM_EINVALID_ARGUMENT;
            out[o++] = (char)c;
        } else {
            if (o + 3 >= cap) return WM_EINVALID_ARGUMENT;
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    return (int)o;
}

static int wm_hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1; /* lower case is not canonical */
}

int wm_pct_decode(const char *in, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    if (in == NULL || out == NULL || cap == 0) return WM_EINVALID_ARGUMENT;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (o + 1 >= cap) return WM_EINVALID_ARGUMENT;
        if (c == '%') {
            if (len - i < 3) return WM_EINVALID_ARGUMENT;
            int hi = wm_hexval(in[i + 1]), lo = wm_hexval(in[i + 2]);
            if (hi < 0 || lo < 0) return WM_EINVALID_ARGUMENT;
            unsigned char b = (unsigned char)(hi << 4 | lo);
            if (wm_unreserved(b)) return WM_EINVALID_ARGUMENT;
            out[o++] = (char)b;
            i += 2;
        } else if (wm_unreserved(c)) {
            out[o++] = (char)c;
        } else {
            return WM_EINVALID_ARGUMENT;
        }
    }
    out[o] = '\0';
    return (int)o;
}

/* Append s to out at *pos, keeping room for the terminator. */
static int wm_put(char *out, size_t cap, size_t *pos, const char *s, size_t len)
{
    if (*pos + len >= cap) return WM_EINVALID_ARGUMENT;
    memcpy(out + *pos, s, len);
    *pos += len;
    out[*pos] = '\0';
    return WM_OK;
}

static int wm_put_component(char *out, size_t cap, size_t *pos, const char *s)
{
    int n;
    if (wm_put(out, cap, pos, "/", 1) < 0) return WM_EINVALID_ARGUMENT;
    if ((n = wm_pct_encode(s, strlen(s), out + *pos, cap - *pos)) < 0) return n;
    *pos += (size_t)n;
    return WM_OK;
}

/* Write v in decimal at p (room for 20 digits); returns the digits' end. */
static char *wm_put_u64(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0) *p++ = tmp[--n];
    return p;
}

int wm_group_key_checked(const wm_identity *id, char *out, size_t cap)
{
    char num[24];
    size_t pos = 0;
    if (out == NULL || cap == 0) return WM_EINVALID_ARGUMENT;
    out[0] = '\0';
    if (wm_put(out, cap, &pos, WM_KEY_PREFIX, strlen(WM_KEY_PREFIX)) < 0 ||
        wm_put_component(out, cap, &pos, id->tenant_id) < 0 ||
        wm_put_component(out, cap, &pos, id->ns) < 0 ||
        wm_put_component(out, cap, &pos, id->resource_id) < 0 ||
        wm_put_component(out, cap, &pos, id->revision) < 0)
        return WM_EINVALID_ARGUMENT;
    num[0] = '/';
    char *end = wm_put_u64(num + 1, id->weight_generation);
    if (wm_put(out, cap, &pos, num, (size_t)(end - num)) < 0) return WM_EINVALID_ARGUMENT;
    if (pos > WM_KEY_MAX) return WM_EINVALID_ARGUMENT;
    return (int)pos;
}

int wm_group_key(const wm_identity *id, char *out, size_t cap)
{
    if (out == NULL || cap == 0 || wm_identity_check(id, NULL, 0) < 0) return WM_EINVALID_ARGUMENT;
    return wm_group_key_checked(id, out, cap);
}

int wm_manifest_key(const wm_identity *id, char *out, size_t cap)
{
    int n = wm_group_key(id, out, cap);
    if (n < 0) return n;
    size_t pos = (size_t)n;
    if (wm_put(out, cap, &pos, "/manifest", 9) < 0 || pos > WM_KEY_MAX) return WM_EINVALID_ARGUMENT;
    return (int)pos;
}

int wm_revision_bind_keys(wm_revision *rev, wm_rev_keys *keys)
{
    int n = wm_group_key(&rev->id, keys->group_key, sizeof(keys->group_key));
    if (n < 0 || (size_t)n + 9 > WM_KEY_MAX) return WM_EINVALID_ARGUMENT;
    memcpy(keys->manifest_key, keys->group_key, (size_t)n);
    memcpy(keys->manifest_key + n, "/manifest", 10);
    rev->group_key = keys->group_key;
    rev->manifest_key = keys->manifest_key;
    return WM_OK;
}

int wm_payload_key(const wm_identity *id, uint64_t idx, char *out, size_t cap)
{
    char num[32];
    int n = wm_group_key(id, out, cap);
    if (n < 0) return n;
    size_t pos = (size_t)n;
    int k = snprintf(num, sizeof(num), "/payload/%" PRIu64, idx);
    if (wm_put(out, cap, &pos, num, (size_t)k) < 0 || pos > WM_KEY_MAX) return WM_EINVALID_ARGUMENT;
    return (int)pos;
}

/* Parse a canonical decimal (no sign, no leading zero unless "0"). */
static int wm_parse_u64(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    if (len == 0 || len > 20 || (len > 1 && s[0] == '0')) return WM_EINVALID_ARGUMENT;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return WM_EINVALID_ARGUMENT;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return WM_EINVALID_ARGUMENT;
        v = v * 10 + d;
    }
    *out = v;
    return WM_OK;
}

/* Decode one component [s, s+len) into a member buffer and validate it. */
static int wm_take_component(const char *s, size_t len, char *dst)
{
    char buf[WM_ID_COMPONENT_MAX + 1];
    int n = wm_pct_decode(s, len, buf, sizeof(buf));
    if (n < 0) return WM_EINVALID_ARGUMENT;
    if (wm_component_check(buf, (size_t)n) < 0) return WM_EINVALID_ARGUMENT;
    memcpy(dst, buf, (size_t)n + 1);
    return WM_OK;
}

int wm_key_parse(const char *key, wm_identity_buf *out, wm_key_kind *kind, uint64_t *out_n)
{
    const char *part[8];
    size_t plen[8];
    size_t nparts = 0;
    uint64_t n = 0;
    wm_key_kind k;

    if (key == NULL || out == NULL || kind == NULL) return WM_EINVALID_ARGUMENT;
    size_t len = strnlen(key, WM_KEY_MAX + 1);
    if (len == 0 || len > WM_KEY_MAX) return WM_EINVALID_ARGUMENT;
    const char *p = key, *end = key + len;
    while (p <= end) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        const char *stop = slash != NULL ? slash : end;
        if (nparts == 8) return WM_EINVALID_ARGUMENT;
        part[nparts] = p;
        plen[nparts++] = (size_t)(stop - p);
        p = stop + 1;
    }
    if (nparts < 6 || plen[0] != strlen(WM_KEY_PREFIX) ||
        memcmp(part[0], WM_KEY_PREFIX, plen[0]) != 0)
        return WM_EINVALID_ARGUMENT;
    if (nparts == 6) {
        k = WM_KEY_GROUP;
    } else if (nparts == 7 && plen[6] == 8 && memcmp(part[6], "manifest", 8) == 0) {
        k = WM_KEY_MANIFEST;
    } else if (nparts == 8 && plen[6] == 7 && memcmp(part[6], "payload", 7) == 0) {
        k = WM_KEY_PAYLOAD;
        if (wm_parse_u64(part[7], plen[7], &n) < 0) return WM_EINVALID_ARGUMENT;
    } else {
        return WM_EINVALID_ARGUMENT;
    }
    if (wm_take_component(part[1], plen[1], out->s[0]) < 0 ||
        wm_take_component(part[2], plen[2], out->s[1]) < 0 ||
        wm_take_component(part[3], plen[3], out->s[2]) < 0 ||
        wm_take_component(part[4], plen[4], out->s[3]) < 0 ||
        wm_parse_u64(part[5], plen[5], &out->id.weight_generation) < 0)
        return WM_EINVALID_ARGUMENT;
    wm_identity_buf_bind(out);
    if (wm_identity_check(&out->id, NULL, 0) < 0) return WM_EINVALID_ARGUMENT;
    *kind = k;
    if (out_n != NULL) *out_n = n;
    return WM_OK;
}

/* ------------------------------------------------------------------------ */
/* Enum names                                                                */
/* ------------------------------------------------------------------------ */

static const char *const wm_avail_names[] = {NULL, "IMPORTING", "READY", "DEGRADED",
                                             "DELETING", "DELETED"};
static const char *const wm_res_names[] = {"UNKNOWN", "HOT", "COLD", "MIXED", "ABSENT"};
static const char *const wm_mode_names[] = {NULL, "PINNED", "MANUAL", "AUTO"};
static const char *const wm_kind_names[] = {NULL, "MIGRATING", "REPAIRING", "DELETING",
                                            "IMPORTING"};
static const char *const wm_state_names[] = {NULL, "RUNNING", "SUCCEEDED", "FAILED"};
static const char *const wm_upsert_names[] = {NULL, "PUT_FIRST", "DELETE_FIRST"};
static const char *const wm_phase_names[] = {NULL, "CLAIMED", "IMPORTING_TARGET",
                                             "BASE_FENCED", "DRAINING_BASE", "DELETING_BASE",
                                             "BASE_DELETED", "COMMITTED", "ABORTED"};

#define WM_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *wm_name_of(const char *const *names, int n, int v)
{
    if (v < 0 || v >= n || names[v] == NULL) return "?";
    return names[v];
}

/* Index of s among names (any case), or -1. */
static int wm_value_of(const char *const *names, int n, const char *s)
{
    if (s == NULL) return -1;
    for (int i = 0; i < n; i++)
        if (names[i] != NULL && strcasecmp(names[i], s) == 0) return i;
    return -1;
}

const char *wm_availability_name(int v) { return wm_name_of(wm_avail_names, WM_COUNT(wm_avail_names), v); }
const char *wm_residency_name(int v) { return wm_name_of(wm_res_names, WM_COUNT(wm_res_names), v); }
const char *wm_mode_name(int v) { return wm_name_of(wm_mode_names, WM_COUNT(wm_mode_names), v); }
const char *wm_op_kind_name(int v) { return wm_name_of(wm_kind_names, WM_COUNT(wm_kind_names), v); }
const char *wm_op_state_name(int v) { return wm_name_of(wm_state_names, WM_COUNT(wm_state_names), v); }
const char *wm_upsert_mode_name(int v) { return wm_name_of(wm_upsert_names, WM_COUNT(wm_upsert_names), v); }
const char *wm_phase_name(int v) { return wm_name_of(wm_phase_names, WM_COUNT(wm_phase_names), v); }

int wm_availability_valid(int v) { return v >= WM_AVAIL_IMPORTING && v <= WM_AVAIL_DELETED; }
int wm_residency_valid(int v) { return v >= WM_RES_UNKNOWN && v <= WM_RES_ABSENT; }
int wm_mode_valid(int v) { return v >= WM_MODE_PINNED && v <= WM_MODE_AUTO; }
int wm_op_kind_valid(int v) { return v >= WM_OPK_MIGRATING && v <= WM_OPK_IMPORTING; }
int wm_op_state_valid(int v) { return v >= WM_OPS_RUNNING && v <= WM_OPS_FAILED; }
int wm_upsert_mode_valid(int v) { return v == WM_UPSERT_PUT_FIRST || v == WM_UPSERT_DELETE_FIRST; }
int wm_phase_valid(int v) { return v >= WM_PHASE_CLAIMED && v <= WM_PHASE_ABORTED; }

int wm_availability_from_name(const char *s, wm_availability *out)
{
    int v = wm_value_of(wm_avail_names, WM_COUNT(wm_avail_names), s);
    if (v < 0) return WM_EINVALID_ARGUMENT;
    *out = (wm_availability)v;
    return WM_OK;
}

int wm_residency_from_name(const char *s, wm_residency *out)
{
    int v = wm_value_of(wm_res_names, WM_COUNT(wm_res_names), s);
    if (v < 0) return WM_EINVALID_ARGUMENT;
    *out = (wm_residency)v;
    return WM_OK;
}

int wm_mode_from_name(const char *s, wm_migration_mode *out)
{
    int v = wm_value_of(wm_mode_names, WM_COUNT(wm_mode_names), s);
    if (v < 0) return WM_EINVALID_ARGUMENT;
    *out = (wm_migration_mode)v;
    return WM_OK;
}

int wm_op_kind_from_name(const char *s, wm_op_kind *out)
{
    int v = wm_value_of(wm_kind_names, WM_COUNT(wm_kind_names), s);
    if (v < 0) return WM_EINVALID_ARGUMENT;
    *out = (wm_op_kind)v;
    return WM_OK;
}

int wm_upsert_mode_from_name(const char *s, wm_upsert_mode *out)
{
    int v = wm_value_of(wm_upsert_names, WM_COUNT(wm_upsert_names), s);
    if (v < 0) return WM_EINVALID_ARGUMENT;
    *out = (wm_upsert_mode)v;
    return WM_OK;
}

/* ------------------------------------------------------------------------ */
/* Policy                                                                    */
/* ------------------------------------------------------------------------ */

wm_policy wm_policy_default(void)
{
    wm_policy p = {WM_RES_MIXED, WM_DEFAULT_MIXED_HOT_RATIO, WM_MODE_AUTO};
    return p;
}

int wm_policy_check(const wm_policy *p, char *msg, size_t cap)
{
    if (p == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "policy is missing");
    if (p->preferred != WM_RES_HOT && p->preferred != WM_RES_COLD && p->preferred != WM_RES_MIXED)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "preferred_residency %d (%s) is not HOT, COLD or MIXED", (int)p->preferred,
                       wm_residency_name((int)p->preferred));
    if (!isfinite(p->mixed_hot_ratio) || !(p->mixed_hot_ratio > 0.0) || !(p->mixed_hot_ratio < 1.0))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "mixed_hot_ratio %g is outside (0, 1)",
                       p->mixed_hot_ratio);
    if (!wm_mode_valid((int)p->mode))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "migration_mode %d is not PINNED, MANUAL or AUTO", (int)p->mode);
    return WM_OK;
}

int wm_policy_from_names(const char *preferred,
                         double ratio,
                         const char *mode,
                         wm_policy *out,
                         char *msg,
                         size_t cap)
{
    wm_policy p;
    if (wm_residency_from_name(preferred, &p.preferred) < 0 ||
        (p.preferred != WM_RES_HOT && p.preferred != WM_RES_COLD && p.preferred != WM_RES_MIXED))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "preferred residency \"%s\" is not hot, cold or mixed",
                       preferred != NULL ? preferred : "(none)");
    if (wm_mode_from_name(mode, &p.mode) < 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "migration mode \"%s\" is not pinned, manual or auto",
                       mode != NULL ? mode : "(none)");
    p.mixed_hot_ratio = ratio;
    int rc = wm_policy_check(&p, msg, cap);
    if (rc < 0) return rc;
    *out = p;
    return WM_OK;
}

int wm_policy_resolve(const wm_policy *call,
                      const wm_policy *client_default,
                      const wm_policy *cluster_default,
                      wm_policy *out)
{
    const wm_policy *p = call != NULL ? call : client_default != NULL ? client_default
                                                                      : cluster_default;
    if (p == NULL || out == NULL || wm_policy_check(p, NULL, 0) < 0) return WM_EINVALID_ARGUMENT;
    *out = *p;
    return WM_OK;
}

/* ------------------------------------------------------------------------ */
/* Affinity summary and sealing digests                                      */
/* ------------------------------------------------------------------------ */

void wm_affinity_clear(wm_affinity *a)
{
    if (a == NULL) return;
    if (!a->borrowed) {
        for (size_t i = 0; i < a->n_units; i++) {
            for (size_t j = 0; j < a->units[i].n_members; j++) free(a->units[i].members[j]);
            free(a->units[i].members);
        }
        free(a->units);
    }
    a->units = NULL;
    a->n_units = 0;
    a->borrowed = 0;
}

int wm_affinity_copy(const wm_affinity *in, wm_affinity *out)
{
    wm_affinity c = {NULL, 0, 0};
    if (in == NULL || out == NULL) return WM_EINVALID_ARGUMENT;
    if (in->n_units > 0) {
        c.units = calloc(in->n_units, sizeof(*c.units));
        if (c.units == NULL) return SMP_ENOMEM;
    }
    for (size_t i = 0; i < in->n_units; i++) {
        const wm_affinity_unit *u = &in->units[i];
        c.n_units = i + 1;
        c.units[i].logical_bytes = u->logical_bytes;
        if (u->n_members == 0) continue;
        c.units[i].members = calloc(u->n_members, sizeof(char *));
        if (c.units[i].members == NULL) goto free_copy;
        for (size_t j = 0; j < u->n_members; j++) {
            c.units[i].n_members = j + 1;
            c.units[i].members[j] = strdup(u->members[j] != NULL ? u->members[j] : "");
            if (c.units[i].members[j] == NULL) goto free_copy;
        }
    }
    *out = c;
    return WM_OK;
free_copy:
    wm_affinity_clear(&c);
    return SMP_ENOMEM;
}

static int wm_str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* SHA-256 fetched from the default provider once, not at each digest:
 * OpenSSL 3 fetches the implementation of EVP_sha256() again at every
 * EVP_DigestInit_ex (a lookup under a lock), which was some 40% of a
 * digest of an affinity summary -- a digest each revision a restart loads.
 * Released by wm_digest_release (the plugin's fini). EVP_sha256() when the
 * fetch fails (the digests then work as before). */
static _Atomic(EVP_MD *) wm_sha256_fetched;

static const EVP_MD *wm_sha256(void)
{
    EVP_MD *md = atomic_load(&wm_sha256_fetched);
    if (md != NULL) return md;
    EVP_MD *f = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (f == NULL) return EVP_sha256();
    if (!atomic_compare_exchange_strong(&wm_sha256_fetched, &md, f)) {
        EVP_MD_free(f); /* another thread's came first: md is it */
        return md;
    }
    return f;
}

void wm_digest_release(void)
{
    EVP_MD_free(atomic_exchange(&wm_sha256_fetched, NULL));
}

int wm_payload_keys_digest(const char *const *keys, size_t n, uint8_t out[WM_SHA256_LEN])
{
    int rc = WM_OK;
    const char **sorted = NULL;
    EVP_MD_CTX *ctx = NULL;
    unsigned len = 0;

    if (out == NULL || (n > 0 && keys == NULL)) return WM_EINVALID_ARGUMENT;
    for (size_t i = 0; i < n; i++)
        if (keys[i] == NULL || strchr(keys[i], '\n') != NULL) return WM_EINVALID_ARGUMENT;
    if (n > 0) {
        sorted = malloc(n * sizeof(*sorted));
        if (sorted == NULL) return SMP_ENOMEM;
        memcpy(sorted, keys, n * sizeof(*sorted));
        qsort(sorted, n, sizeof(*sorted), wm_str_ptr_cmp);
    }
    if ((ctx = EVP_MD_CTX_new()) == NULL) {
        rc = SMP_ENOMEM;
        goto free_sorted;
    }
    if (EVP_DigestInit_ex(ctx, wm_sha256(), NULL) != 1) {
        rc = SMP_ENOMEM;
        goto free_ctx;
    }
    for (size_t i = 0; i < n; i++) {
        if (EVP_DigestUpdate(ctx, sorted[i], strlen(sorted[i])) != 1 ||
            EVP_DigestUpdate(ctx, "\n", 1) != 1) {
            rc = SMP_ENOMEM;
            goto free_ctx;
        }
    }
    if (EVP_DigestFinal_ex(ctx, out, &len) != 1) rc = SMP_ENOMEM;
free_ctx:
    EVP_MD_CTX_free(ctx);
free_sorted:
    free(sorted);
    return rc;
}

int wm_affinity_digest(const wm_affinity *a, uint8_t out[WM_SHA256_LEN])
{
    int rc = WM_OK;
    EVP_MD_CTX *ctx = NULL;
    unsigned len = 0;
    char line[80];

    if (a == NULL || out == NULL || (a->n_units > 0 && a->units == NULL))
        return WM_EINVALID_ARGUMENT;
    for (size_t i = 0; i < a->n_units; i++)
        for (size_t j = 0; j < a->units[i].n_members; j++)
            if (a->units[i].members[j] == NULL || strchr(a->units[i].members[j], '\n') != NULL)
                return WM_EINVALID_ARGUMENT;
    if ((ctx = EVP_MD_CTX_new()) == NULL) return SMP_ENOMEM;
    if (EVP_DigestInit_ex(ctx, wm_sha256(), NULL) != 1) {
        rc = SMP_ENOMEM;
        goto free_ctx;
    }
    for (size_t i = 0; i < a->n_units; i++) {
        const wm_affinity_unit *u = &a->units[i];
        /* "unit <logical_bytes> <n_members>\n" */
        memcpy(line, "unit ", 5);
        char *e = wm_put_u64(line + 5, u->logical_bytes);
        *e++ = ' ';
        e = wm_put_u64(e, (uint64_t)u->n_members);
        *e++ = '\n';
        if (EVP_DigestUpdate(ctx, line, (size_t)(e - line)) != 1) {
            rc = SMP_ENOMEM;
            goto free_ctx;
        }
        for (size_t j = 0; j < u->n_members; j++) {
            if (EVP_DigestUpdate(ctx, u->members[j], strlen(u->members[j])) != 1 ||
                EVP_DigestUpdate(ctx, "\n", 1) != 1) {
                rc = SMP_ENOMEM;
                goto free_ctx;
            }
        }
    }
    if (EVP_DigestFinal_ex(ctx, out, &len) != 1) rc = SMP_ENOMEM;
free_ctx:
    EVP_MD_CTX_free(ctx);
    return rc;
}

/* Whether m is <gk>/payload/<n>, a payload key of the group whose
 * canonical key is gk (gl bytes): what wm_key_parse accepts as a payload
 * key whose identity is gk's. A canonical key has one spelling (each
 * component percent-encoded exactly as wm_pct_decode accepts back, decimal
 * numbers without leading zeros), so the comparison of the spellings is the
 * comparison of the parsed identities. */
static int wm_is_payload_key_of(const char *m, const char *gk, size_t gl)
{
    uint64_t n;
    size_t len = strnlen(m, WM_KEY_MAX + 1);
    if (len > WM_KEY_MAX || len <= gl + 9 || memcmp(m, gk, gl) != 0 ||
        memcmp(m + gl, "/payload/", 9) != 0)
        return 0;
    return wm_parse_u64(m + gl + 9, len - gl - 9, &n) == WM_OK;
}

int wm_affinity_check(const wm_affinity *a, const wm_revision *rev, char *msg, size_t cap)
{
    char key[WM_KEY_MAX + 1];
    /* An identity without a group key has no payload key either: the first
     * member is then refused, as its parse refused it. */
    if (rev != NULL && wm_group_key(&rev->id, key, sizeof(key)) < 0) key[0] = '\0';
    return wm_affinity_check_keyed(a, rev, rev != NULL ? key : NULL, msg, cap);
}

int wm_affinity_check_keyed(const wm_affinity *a, const wm_revision *rev, const char *group_key,
                            char *msg, size_t cap)
{
    int rc = WM_OK;
    const char *few[16];
    const char **all = few;
    size_t n_all = 0, at = 0;
    uint64_t bytes = 0;
    uint8_t digest[WM_SHA256_LEN];

    if (a == NULL || rev == NULL || group_key == NULL)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "affinity summary is missing");
    if (a->n_units == 0 || a->n_units != rev->affinity_count)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "affinity summary has %zu units, the revision records %" PRIu64,
                       a->n_units, rev->affinity_count);
    for (size_t i = 0; i < a->n_units; i++) {
        const wm_affinity_unit *u = &a->units[i];
        if (u->n_members == 0 || u->members == NULL)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "affinity unit %zu has no member", i);
        if (n_all + u->n_members < n_all || bytes + u->logical_bytes < bytes)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "affinity summary overflows");
        n_all += u->n_members;
        bytes += u->logical_bytes;
    }
    if (n_all != rev->payload_count)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "affinity units hold %zu members, the revision has %" PRIu64 " payloads",
                       n_all, rev->payload_count);
    if (bytes != rev->logical_bytes)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "affinity units hold %" PRIu64 " bytes, the revision has %" PRIu64, bytes,
                       rev->logical_bytes);
    if (n_all > sizeof(few) / sizeof(few[0]) && (all = malloc(n_all * sizeof(*all))) == NULL)
        return SMP_ENOMEM;
    size_t gl = strlen(group_key);
    for (size_t i = 0; i < a->n_units; i++) {
        for (size_t j = 0; j < a->units[i].n_members; j++) {
            const char *m = a->units[i].members[j];
            if (m == NULL || gl == 0 || !wm_is_payload_key_of(m, group_key, gl)) {
                rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                             "affinity unit %zu member %zu is not a payload key of the revision",
                             i, j);
                goto free_all;
            }
            all[at++] = m;
        }
    }
    if (n_all > 1) qsort(all, n_all, sizeof(*all), wm_str_ptr_cmp);
    for (size_t i = 1; i < n_all; i++) {
        if (strcmp(all[i - 1], all[i]) == 0) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "payload %s is in two affinity units",
                         all[i]);
            goto free_all;
        }
    }
    if ((rc = wm_affinity_digest(a, digest)) < 0) goto free_all;
    if (memcmp(digest, rev->affinity_sha256, WM_SHA256_LEN) != 0)
        rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                     "affinity digest does not match the revision's affinity_sha256");
free_all:
    if (all != few) free(all);
    return rc;
}
