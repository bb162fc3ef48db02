/* wc_manifest.c -- the manifest model: building, canonical order, validation,
 * protobuf-c encoding and decoding, and its digest.
 *
 * Everything a reader trusts about a manifest is checked in one place,
 * manifest_validate(), which both the writer's finalize and the reader's
 * decode run; a manifest that passes can be planned without further bounds
 * checks (wc_plan relies on that). See wc_manifest.h for the rules. */
#include "wc_manifest.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "manifest.pb-c.h"
#include "wm_errbuf.h"

/* Make room for one more element in *arr (elem bytes each, *cap allocated,
 * n used), doubling. Returns SMP_OK or SMP_ENOMEM (the array is unchanged). */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return SMP_OK;
    size_t ncap = *cap ? *cap * 2 : 16;
    if (ncap > SIZE_MAX / elem) return SMP_ENOMEM;
    void *p = realloc(*arr, ncap * elem);
    if (p == NULL) return SMP_ENOMEM;
    *arr = p;
    *cap = ncap;
    return SMP_OK;
}

/* ---- the group key ----------------------------------------------------- */

static int is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

/* Append the percent-encoding of s to out (which has room: 3 bytes per input
 * byte); returns the new end. */
static char *pct_encode(char *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (is_unreserved(*p)) {
            *out++ = (char)*p;
        } else {
            *out++ = '%';
            *out++ = hex[*p >> 4];
            *out++ = hex[*p & 15];
        }
    }
    return out;
}

int wc_group_key(const wc_identity *id, char **out)
{
    const char *parts[4];
    size_t need = sizeof("weights/") + 4 + 21;
    if (id == NULL) return SMP_EINVAL;
    parts[0] = id->tenant_id;
    parts[1] = id->namespace_id;
    parts[2] = id->resource_id;
    parts[3] = id->revision;
    for (int i = 0; i < 4; i++) {
        if (parts[i] == NULL || parts[i][0] == '\0') return SMP_EINVAL;
        size_t l = strlen(parts[i]);
        if (l > (SIZE_MAX - need) / 3) return SMP_ENOMEM;
        need += 3 * l;
    }
    char *buf = malloc(need);
    if (buf == NULL) return SMP_ENOMEM;
    char *p = buf;
    memcpy(p, "weights/", 8);
    p += 8;
    for (int i = 0; i < 4; i++) {
        p = pct_encode(p, parts[i]);
        *p++ = '/';
    }
    snprintf(p, 21, "%llu", (unsigned long long)id->generation);
    *out = buf;
    return SMP_OK;
}

/* ---- building ------------------------------------------------------------ */

void wc_manifest_free(wc_manifest *m)
{
    if (m == NULL) return;
    free(m->identity.tenant_id);
    free(m->identity.namespace_id);
    free(m->identity.resource_id);
    free(m->identity.revision);
    free(m->group);
    for (size_t i = 0; i < m->n_tensors; i++) free(m->tensors[i].name);
    free(m->tensors);
    free(m->fragments);
    for (size_t i = 0; i < m->n_alias_groups; i++) free(m->alias_groups[i].tensors);
    free(m->alias_groups);
    for (size_t i = 0; i < m->n_objects; i++) {
        free(m->objects[i].key);
        free(m->objects[i].chunk_xxh3);
    }
    free(m->objects);
    for (size_t i = 0; i < m->n_units; i++) free(m->units[i].objects);
    free(m->units);
    for (size_t i = 0; i < m->n_file_meta; i++) {
        free(m->file_meta[i].key);
        free(m->file_meta[i].value);
    }
    free(m->file_meta);
    free(m->name_slots_);
    memset(m, 0, sizeof *m);
}

static char *dup_str(const char *s)
{
    size_t l = strlen(s);
    char *p = malloc(l + 1);
    if (p != NULL) memcpy(p, s, l + 1);
    return p;
}

int wc_manifest_init(wc_manifest *m, const wc_identity *id, char *err, size_t errlen)
{
    int rc;
    memset(m, 0, sizeof *m);
    rc = wc_group_key(id, &m->group);
    if (rc == SMP_EINVAL) {
        wm_errbuf(err, errlen, "manifest identity: tenant, namespace, resource and "
                "revision must be non-empty");
        return rc;
    }
    if (rc < 0) goto fail;
    rc = SMP_ENOMEM;
    if ((m->identity.tenant_id = dup_str(id->tenant_id)) == NULL) goto free_model;
    if ((m->identity.namespace_id = dup_str(id->namespace_id)) == NULL) goto free_model;
    if ((m->identity.resource_id = dup_str(id->resource_id)) == NULL) goto free_model;
    if ((m->identity.revision = dup_str(id->revision)) == NULL) goto free_model;
    m->identity.generation = id->generation;
    return SMP_OK;
free_model:
    wc_manifest_free(m);
fail:
    wm_errbuf(err, errlen, "manifest identity: out of memory");
    return rc;
}

int wc_manifest_add_tensor(wc_manifest *m, const char *name, wc_dtype dtype,
                           uint32_t ndim, const uint64_t *shape, uint32_t *out_index)
{
    if (name == NULL || wc_dtype_size(dtype) == 0 || ndim > WC_MAX_NDIM ||
        (ndim > 0 && shape == NULL) || m->n_tensors >= WC_NONE)
        return SMP_EINVAL;
    if (grow((void **)&m->tensors, &m->cap_tensors_, m->n_tensors, sizeof *m->tensors) < 0)
        return SMP_ENOMEM;
    wc_tensor *t = &m->tensors[m->n_tensors];
    memset(t, 0, sizeof *t);
    if ((t->name = dup_str(name)) == NULL) return SMP_ENOMEM;
    t->dtype = dtype;
    t->item_size = wc_dtype_size(dtype);
    t->ndim = ndim;
    if (ndim > 0) memcpy(t->shape, shape, ndim * sizeof *shape);
    t->alias_group = WC_NONE;
    t->storage = (uint32_t)m->n_tensors;
    if (out_index) *out_index = (uint32_t)m->n_tensors;
    m->n_tensors++;
    m->finalized_ = 0;
    return SMP_OK;
}

int wc_manifest_set_attachment(wc_manifest *m, uint32_t index)
{
    if (m == NULL || index >= m->n_tensors) return SMP_EINVAL;
    m->tensors[index].attachment = 1;
    m->finalized_ = 0;
    return SMP_OK;
}

size_t wc_manifest_n_plain(const wc_manifest *m)
{
    size_t n = 0;
    while (n < m->n_tensors && !m->tensors[n].attachment) n++;
    return n;
}

/* The attachment rules of tensor i (see wc_manifest.h). SMP_OK or SMP_EINVAL
 * with a message. */
static int validate_attachment(const wc_manifest *m, size_t i, char *err, size_t errlen)
{
    const wc_tensor *t = &m->tensors[i];
    if (!t->attachment) {
        if (i > 0 && m->tensors[i - 1].attachment) {
            wm_errbuf(err, errlen, "tensor '%s' comes after an attachment", t->name);
            return SMP_EINVAL;
        }
        return SMP_OK;
    }
    if (t->dtype != WC_DTYPE_U8 || t->ndim != 1) {
        wm_errbuf(err, errlen, "attachment '%s' is not U8 with one dimension", t->name);
        return SMP_EINVAL;
    }
    if (t->shape[0] > WC_ATTACHMENT_MAX_BYTES) {
        wm_errbuf(err, errlen, "attachment '%s': %llu bytes, over the %llu bytes of an attachment",
                  t->name, (unsigned long long)t->shape[0],
                  (unsigned long long)WC_ATTACHMENT_MAX_BYTES);
        return SMP_EINVAL;
    }
    if (strchr(t->name, '/') != NULL || strcmp(t->name, ".") == 0 || strcmp(t->name, "..") == 0) {
        wm_errbuf(err, errlen, "attachment '%s' is not a file name", t->name);
        return SMP_EINVAL;
    }
    if (t->alias_group != WC_NONE) {
        wm_errbuf(err, errlen, "attachment '%s' is in an alias group", t->name);
        return SMP_EINVAL;
    }
    return SMP_OK;
}

/* 1 when s is valid UTF-8 (no overlong forms, no surrogates, at most
 * U+10FFFF), 0 otherwise. */
static int is_utf8(const char *str)
{
    const unsigned char *p = (const unsigned char *)str;
    while (*p) {
        unsigned c = *p, n;
        uint32_t cp;
        if (c < 0x80) {
            p++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) n = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) n = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) n = 3, cp = c & 0x07;
        else return 0;
        for (unsigned k = 1; k <= n; k++) {
            if ((p[k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[k] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        p += n + 1;
    }
    return 1;
}

int wc_file_meta_check(const char *key, const char *value, char *err, size_t errlen)
{
    if (key == NULL || key[0] == '\0' || value == NULL) {
        wm_errbuf(err, errlen, "file metadata: an empty key or no value");
        return SMP_EINVAL;
    }
    if (!is_utf8(key) || !is_utf8(value)) {
        wm_errbuf(err, errlen, "file metadata '%.64s': key or value is not valid UTF-8", key);
        return SMP_EINVAL;
    }
    return SMP_OK;
}

int wc_manifest_add_file_meta(wc_manifest *m, const char *key, const char *value, char *err,
                              size_t errlen)
{
    int rc = wc_file_meta_check(key, value, err, errlen);
    if (rc < 0) return rc;
    size_t bytes = strlen(key) + strlen(value);
    if (m->n_file_meta >= WC_FILE_META_MAX_PAIRS ||
        bytes > WC_FILE_META_MAX_BYTES - m->file_meta_bytes_) {
        wm_errbuf(err, errlen, "file metadata '%.64s': over the %u pairs or %u bytes a revision "
                  "keeps", key, WC_FILE_META_MAX_PAIRS, WC_FILE_META_MAX_BYTES);
        return SMP_EINVAL;
    }
    size_t at = m->n_file_meta;
    while (at > 0 && strcmp(m->file_meta[at - 1].key, key) > 0) at--;
    if (at > 0 && strcmp(m->file_meta[at - 1].key, key) == 0) {
        wm_errbuf(err, errlen, "file metadata '%.64s' given twice", key);
        return SMP_EINVAL;
    }
    if (grow((void **)&m->file_meta, &m->cap_file_meta_, m->n_file_meta, sizeof *m->file_meta) < 0)
        return SMP_ENOMEM;
    wc_file_meta pair = {dup_str(key), dup_str(value)};
    if (pair.key == NULL || pair.value == NULL) {
        free(pair.key);
        free(pair.value);
        return SMP_ENOMEM;
    }
    memmove(&m->file_meta[at + 1], &m->file_meta[at], (m->n_file_meta - at) * sizeof pair);
    m->file_meta[at] = pair;
    m->n_file_meta++;
    m->file_meta_bytes_ += bytes;
    return SMP_OK;
}

int wc_manifest_add_object(wc_manifest *m, const char *key, uint64_t bytes, uint32_t *out_index)
{
    if (key == NULL || m->n_objects >= WC_NONE) return SMP_EINVAL;
    if (grow((void **)&m->objects, &m->cap_objects_, m->n_objects, sizeof *m->objects) < 0)
        return SMP_ENOMEM;
    wc_object *o = &m->objects[m->n_objects];
    memset(o, 0, sizeof *o);
    if ((o->key = dup_str(key)) == NULL) return SMP_ENOMEM;
    o->bytes = bytes;
    o->unit = WC_NONE;
    if (out_index) *out_index = (uint32_t)m->n_objects;
    m->n_objects++;
    m->finalized_ = 0;
    return SMP_OK;
}

int wc_manifest_set_object_check(wc_manifest *m, uint32_t object, const uint8_t *sha256,
                                 uint64_t chunk_bytes, const uint64_t *chunk_xxh3,
                                 size_t n_chunks)
{
    if (m == NULL || object >= m->n_objects) return SMP_EINVAL;
    wc_object *o = &m->objects[object];
    uint64_t *sums = NULL;
    if (n_chunks > 0) {
        if (chunk_bytes == 0 || chunk_xxh3 == NULL ||
            n_chunks != o->bytes / chunk_bytes + (o->bytes % chunk_bytes != 0))
            return SMP_EINVAL;
        if ((sums = malloc(n_chunks * sizeof *sums)) == NULL) return SMP_ENOMEM;
        memcpy(sums, chunk_xxh3, n_chunks * sizeof *sums);
    }
    free(o->chunk_xxh3);
    o->chunk_xxh3 = sums;
    o->n_chunks = n_chunks;
    o->chunk_bytes = n_chunks > 0 ? chunk_bytes : 0;
    o->has_sha256 = sha256 != NULL;
    if (sha256 != NULL) memcpy(o->sha256, sha256, 32);
    return SMP_OK;
}

int wc_manifest_add_fragment(wc_manifest *m, uint32_t tensor, const uint64_t *offset,
                             const uint64_t *shape, uint32_t object,
                             uint64_t object_offset, uint64_t bytes)
{
    if (tensor >= m->n_tensors) return SMP_EINVAL;
    uint32_t nd = m->tensors[tensor].ndim;
    if (nd > 0 && (offset == NULL || shape == NULL)) return SMP_EINVAL;
    if (grow((void **)&m->fragments, &m->cap_fragments_, m->n_fragments,
             sizeof *m->fragments) < 0)
        return SMP_ENOMEM;
    wc_fragment *f = &m->fragments[m->n_fragments];
    memset(f, 0, sizeof *f);
    f->tensor = tensor;
    f->object = object;
    if (nd > 0) {
        memcpy(f->offset, offset, nd * sizeof *offset);
        memcpy(f->shape, shape, nd * sizeof *shape);
    }
    f->object_offset = object_offset;
    f->bytes = bytes;
    m->n_fragments++;
    m->finalized_ = 0;
    return SMP_OK;
}

int wc_manifest_add_alias_group(wc_manifest *m, const uint32_t *tensors, uint32_t n)
{
    if (n > 0 && tensors == NULL) return SMP_EINVAL;
    if (grow((void **)&m->alias_groups, &m->cap_alias_groups_, m->n_alias_groups,
             sizeof *m->alias_groups) < 0)
        return SMP_ENOMEM;
    wc_alias_group *g = &m->alias_groups[m->n_alias_groups];
    g->tensors = malloc((n ? n : 1) * sizeof *tensors);
    if (g->tensors == NULL) return SMP_ENOMEM;
    if (n > 0) memcpy(g->tensors, tensors, n * sizeof *tensors);
    g->n = n;
    m->n_alias_groups++;
    m->finalized_ = 0;
    return SMP_OK;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int wc_manifest_add_unit(wc_manifest *m, const uint32_t *objects, uint32_t n,
                         uint64_t logical_bytes)
{
    if (n > 0 && objects == NULL) return SMP_EINVAL;
    if (grow((void **)&m->units, &m->cap_units_, m->n_units, sizeof *m->units) < 0)
        return SMP_ENOMEM;
    wc_affinity_unit *u = &m->units[m->n_units];
    u->objects = malloc((n ? n : 1) * sizeof *objects);
    if (u->objects == NULL) return SMP_ENOMEM;
    if (n > 0) memcpy(u->objects, objects, n * sizeof *objects);
    qsort(u->objects, n, sizeof *u->objects, cmp_u32);
    u->n = n;
    u->logical_bytes = logical_bytes;
    m->n_units++;
    m->finalized_ = 0;
    return SMP_OK;
}

/* ---- canonical order and the name index --------------------------------- */

static int cmp_fragment(const void *a, const void *b)
{
    const wc_fragment *x = a, *y = b;
    if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
    for (int d = 0; d < WC_MAX_NDIM; d++)
        if (x->offset[d] != y->offset[d]) return x->offset[d] < y->offset[d] ? -1 : 1;
    if (x->object != y->object) return x->object < y->object ? -1 : 1;
    if (x->object_offset != y->object_offset)
        return x->object_offset < y->object_offset ? -1 : 1;
    return 0;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;           /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    return h;
}

/* Build the open-addressing name index; *dup is set to the index of the
 * second tensor with an already-seen name (WC_NONE if none). */
static int build_name_index(wc_manifest *m, uint32_t *dup)
{
    size_t slots = 16;
    *dup = WC_NONE;
    while (slots < 2 * m->n_tensors) slots *= 2;
    free(m->name_slots_);
    m->n_name_slots_ = 0;
    m->name_slots_ = malloc(slots * sizeof *m->name_slots_);
    if (m->name_slots_ == NULL) return SMP_ENOMEM;
    memset(m->name_slots_, 0xff, slots * sizeof *m->name_slots_);
    m->n_name_slots_ = slots;
    for (size_t i = 0; i < m->n_tensors; i++) {
        size_t s = (size_t)hash_str(m->tensors[i].name) & (slots - 1);
        while (m->name_slots_[s] != WC_NONE) {
            if (strcmp(m->tensors[m->name_slots_[s]].name, m->tensors[i].name) == 0) {
                *dup = (uint32_t)i;
                return SMP_OK;
            }
            s = (s + 1) & (slots - 1);
        }
        m->name_slots_[s] = (uint32_t)i;
    }
    return SMP_OK;
}

uint32_t wc_manifest_find_tensor(const wc_manifest *m, const char *name)
{
    if (m == NULL || name == NULL || m->n_name_slots_ == 0) return WC_NONE;
    size_t mask = m->n_name_slots_ - 1;
    size_t s = (size_t)hash_str(name) & mask;
    while (m->name_slots_[s] != WC_NONE) {
        if (strcmp(m->tensors[m->name_slots_[s]].name, name) == 0) return m->name_slots_[s];
        s = (s + 1) & mask;
    }
    return WC_NONE;
}

/* ---- validation ------------------------------------------------------------ */

static int boxes_overlap(const wc_fragment *a, const wc_fragment *b, uint32_t nd)
{
    for (uint32_t d = 0; d < nd; d++) {
        if (a->offset[d] >= b->offset[d] + b->shape[d]) return 0;
        if (b->offset[d] >= a->offset[d] + a->shape[d]) return 0;
    }
    return 1;
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A fragment's byte range, for the check that no two share payload bytes. */
typedef struct byte_range {
    uint32_t object;
    uint32_t tensor;
    uint64_t offset;
    uint64_t bytes;
} byte_range;

static int cmp_byte_range(const void *a, const void *b)
{
    const byte_range *x = a, *y = b;
    if (x->object != y->object) return x->object < y->object ? -1 : 1;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return 0;
}

/* The identity makes the group key, and every object key is a unique key
 * inside that group. SMP_OK, SMP_EINVAL (with a message) or SMP_ENOMEM. */
static int validate_identity_and_objects(wc_manifest *m, char *err, size_t errlen)
{
    int rc;
    char *key = NULL;
    const char **keys = NULL;
    rc = wc_group_key(&m->identity, &key);
    if (rc == SMP_EINVAL) {
        wm_errbuf(err, errlen, "manifest identity: tenant, namespace, resource and "
                "revision must be non-empty");
        return rc;
    }
    if (rc < 0) return rc;
    if (m->group == NULL || strcmp(key, m->group) != 0) {
        wm_errbuf(err, errlen, "manifest group '%s' is not the identity's group '%s'",
                m->group ? m->group : "", key);
        rc = SMP_EINVAL;
        goto free_key;
    }
    size_t glen = strlen(m->group);
    for (size_t i = 0; i < m->n_objects; i++) {
        const char *k = m->objects[i].key;
        if (strncmp(k, m->group, glen) != 0 || k[glen] != '/' || k[glen + 1] == '\0') {
            wm_errbuf(err, errlen, "object %zu: key '%s' is not inside group '%s'", i, k,
                    m->group);
            rc = SMP_EINVAL;
            goto free_key;
        }
    }
    if (m->n_objects > 1) {
        keys = malloc(m->n_objects * sizeof *keys);
        if (keys == NULL) {
            rc = SMP_ENOMEM;
            goto free_key;
        }
        for (size_t i = 0; i < m->n_objects; i++) keys[i] = m->objects[i].key;
        qsort(keys, m->n_objects, sizeof *keys, cmp_str_ptr);
        for (size_t i = 1; i < m->n_objects; i++) {
            if (strcmp(keys[i - 1], keys[i]) == 0) {
                wm_errbuf(err, errlen, "object key '%s' appears twice", keys[i]);
                rc = SMP_EINVAL;
                goto free_keys;
            }
        }
    }
    rc = SMP_OK;
free_keys:
    free(keys);
free_key:
    free(key);
    return rc;
}

/* Tensor names (unique, indexed), dtypes, sizes; alias groups (members exist,
 * match the first, belong to one group). Derives bytes, alias_group and
 * storage, and resets the fragment runs for validate_fragments. */
static int validate_tensors_and_aliases(wc_manifest *m, char *err, size_t errlen)
{
    uint32_t dup;
    int rc = build_name_index(m, &dup);
    if (rc < 0) return rc;
    if (dup != WC_NONE) {
        wm_errbuf(err, errlen, "tensor '%s' appears twice", m->tensors[dup].name);
        return SMP_EINVAL;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        wc_tensor *t = &m->tensors[i];
        if (t->name[0] == '\0') {
            wm_errbuf(err, errlen, "tensor %zu has an empty name", i);
            return SMP_EINVAL;
        }
        if (wc_dtype_size(t->dtype) == 0 || t->item_size != wc_dtype_size(t->dtype) ||
            t->ndim > WC_MAX_NDIM) {
            wm_errbuf(err, errlen, "tensor '%s': bad dtype, item size or rank", t->name);
            return SMP_EINVAL;
        }
        if (wc_shape_bytes(t->shape, t->ndim, t->item_size, &t->bytes) < 0) {
            wm_errbuf(err, errlen, "tensor '%s': size overflows 64 bits", t->name);
            return SMP_EINVAL;
        }
        t->alias_group = WC_NONE;
        t->storage = (uint32_t)i;
        t->frag_first = 0;
        t->frag_count = 0;
    }
    for (size_t g = 0; g < m->n_alias_groups; g++) {
        const wc_alias_group *ag = &m->alias_groups[g];
        if (ag->n < 2) {
            wm_errbuf(err, errlen, "alias group %zu has fewer than two tensors", g);
            return SMP_EINVAL;
        }
        for (uint32_t k = 0; k < ag->n; k++) {
            if (ag->tensors[k] >= m->n_tensors) {
                wm_errbuf(err, errlen, "alias group %zu: tensor index %u does not exist", g,
                        ag->tensors[k]);
                return SMP_EINVAL;
            }
        }
        const wc_tensor *first = &m->tensors[ag->tensors[0]];
        for (uint32_t k = 0; k < ag->n; k++) {
            wc_tensor *t = &m->tensors[ag->tensors[k]];
            if (t->alias_group != WC_NONE) {
                wm_errbuf(err, errlen, "tensor '%s' is in two alias groups", t->name);
                return SMP_EINVAL;
            }
            if (t->dtype != first->dtype || t->ndim != first->ndim ||
                memcmp(t->shape, first->shape, t->ndim * sizeof t->shape[0]) != 0) {
                wm_errbuf(err, errlen, "tensor '%s': dtype or shape differs from '%s' it is "
                        "tied to", t->name, first->name);
                return SMP_EINVAL;
            }
            t->alias_group = (uint32_t)g;
            t->storage = ag->tensors[0];
        }
    }
    for (size_t i = 0; i < m->n_tensors; i++)
        if ((rc = validate_attachment(m, i, err, errlen)) < 0) return rc;
    return SMP_OK;
}

/* One fragment on its own: indices, box inside the tensor, byte count, byte
 * range inside the object. */
static int validate_fragment(const wc_manifest *m, size_t i, char *err, size_t errlen)
{
    const wc_fragment *f = &m->fragments[i];
    if (f->tensor >= m->n_tensors) {
        wm_errbuf(err, errlen, "fragment %zu: tensor index %u does not exist", i, f->tensor);
        return SMP_EINVAL;
    }
    const wc_tensor *t = &m->tensors[f->tensor];
    if (t->storage != f->tensor) {
        wm_errbuf(err, errlen, "tensor '%s': has fragments but is tied to '%s', which holds "
                "the storage", t->name, m->tensors[t->storage].name);
        return SMP_EINVAL;
    }
    if (f->object >= m->n_objects) {
        wm_errbuf(err, errlen, "tensor '%s': fragment names object index %u, which does not "
                "exist", t->name, f->object);
        return SMP_EINVAL;
    }
    for (uint32_t d = 0; d < t->ndim; d++) {
        if (f->shape[d] == 0) {
            wm_errbuf(err, errlen, "tensor '%s': fragment has an empty dimension %u", t->name, d);
            return SMP_EINVAL;
        }
        if (f->offset[d] > t->shape[d] || f->shape[d] > t->shape[d] - f->offset[d]) {
            wm_errbuf(err, errlen, "tensor '%s': fragment at offset %llu + %llu leaves the "
                    "tensor along dimension %u (size %llu)", t->name,
                    (unsigned long long)f->offset[d], (unsigned long long)f->shape[d], d,
                    (unsigned long long)t->shape[d]);
            return SMP_EINVAL;
        }
    }
    for (uint32_t d = t->ndim; d < WC_MAX_NDIM; d++) {
        if (f->offset[d] != 0 || f->shape[d] != 0) {
            wm_errbuf(err, errlen, "tensor '%s': fragment has more dimensions than the tensor",
                    t->name);
            return SMP_EINVAL;
        }
    }
    uint64_t want;
    if (wc_shape_bytes(f->shape, t->ndim, t->item_size, &want) < 0 || want != f->bytes) {
        wm_errbuf(err, errlen, "tensor '%s': fragment says %llu bytes, its local shape holds "
                "%llu", t->name, (unsigned long long)f->bytes, (unsigned long long)want);
        return SMP_EINVAL;
    }
    const wc_object *o = &m->objects[f->object];
    if (f->object_offset > o->bytes || f->bytes > o->bytes - f->object_offset) {
        wm_errbuf(err, errlen, "tensor '%s': fragment bytes [%llu, +%llu) leave object '%s' "
                "of %llu bytes", t->name, (unsigned long long)f->object_offset,
                (unsigned long long)f->bytes, o->key, (unsigned long long)o->bytes);
        return SMP_EINVAL;
    }
    return SMP_OK;
}

/* Fragments of one tensor, in canonical order at [first, first + count): no
 * two overlap and their volumes add up to the tensor's. The sweep compares a
 * fragment only with later ones that start before it ends along dimension 0. */
static int validate_cover(const wc_manifest *m, const wc_tensor *t, size_t first,
                          size_t count, char *err, size_t errlen)
{
    const wc_fragment *f = count > 0 ? &m->fragments[first] : NULL; /* none: no array */
    uint64_t sum = 0;
    for (size_t i = 0; i < count; i++) {
        if (f[i].bytes > t->bytes - sum) {
            wm_errbuf(err, errlen, "tensor '%s': fragments hold more than its %llu bytes "
                    "(they overlap)", t->name, (unsigned long long)t->bytes);
            return SMP_EINVAL;
        }
        sum += f[i].bytes;
        if (t->ndim == 0) continue;
        uint64_t end0 = f[i].offset[0] + f[i].shape[0];
        for (size_t j = i + 1; j < count && f[j].offset[0] < end0; j++) {
            if (boxes_overlap(&f[i], &f[j], t->ndim)) {
                wm_errbuf(err, errlen, "tensor '%s': fragments %zu and %zu overlap", t->name,
                        i, j);
                return SMP_EINVAL;
            }
        }
    }
    if (sum != t->bytes) {
        wm_errbuf(err, errlen, "tensor '%s': fragments cover %llu of its %llu bytes", t->name,
                (unsigned long long)sum, (unsigned long long)t->bytes);
        return SMP_EINVAL;
    }
    return SMP_OK;
}

/* Every fragment on its own, then each storage tensor's cover, then payload
 * bytes shared by no two fragments. Derives frag_first / frag_count (the
 * fragments are in canonical order already). */
static int validate_fragments(wc_manifest *m, char *err, size_t errlen)
{
    int rc;
    byte_range *ranges = NULL;
    for (size_t i = 0; i < m->n_fragments; i++)
        if ((rc = validate_fragment(m, i, err, errlen)) < 0) return rc;
    /* Canonical order is by tensor, so each tensor's fragments are a run. */
    for (size_t i = 0; i < m->n_fragments; i++) {
        wc_tensor *t = &m->tensors[m->fragments[i].tensor];
        if (t->frag_count == 0) t->frag_first = i;
        t->frag_count++;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        const wc_tensor *t = &m->tensors[i];
        if (t->storage != i) continue;
        rc = validate_cover(m, t, t->frag_first, t->frag_count, err, errlen);
        if (rc < 0) return rc;
    }
    /* No two fragments share payload bytes. */
    if (m->n_fragments > 1) {
        ranges = malloc(m->n_fragments * sizeof *ranges);
        if (ranges == NULL) return SMP_ENOMEM;
        for (size_t i = 0; i < m->n_fragments; i++) {
            ranges[i].object = m->fragments[i].object;
            ranges[i].tensor = m->fragments[i].tensor;
            ranges[i].offset = m->fragments[i].object_offset;
            ranges[i].bytes = m->fragments[i].bytes;
        }
        qsort(ranges, m->n_fragments, sizeof *ranges, cmp_byte_range);
        for (size_t i = 1; i < m->n_fragments; i++) {
            const byte_range *a = &ranges[i - 1], *b = &ranges[i];
            if (a->object == b->object && a->offset + a->bytes > b->offset) {
                wm_errbuf(err, errlen, "tensors '%s' and '%s': fragments share bytes of "
                        "object '%s'", m->tensors[a->tensor].name,
                        m->tensors[b->tensor].name, m->objects[a->object].key);
                rc = SMP_EINVAL;
                goto free_ranges;
            }
        }
    }
    rc = SMP_OK;
free_ranges:
    free(ranges);
    return rc;
}

/* Affinity units partition the objects with the right logical bytes, and no
 * tensor's fragments cross a unit boundary. Derives each object's unit. */
static int validate_units(wc_manifest *m, char *err, size_t errlen)
{
    for (size_t i = 0; i < m->n_objects; i++) m->objects[i].unit = WC_NONE;
    for (size_t u = 0; u < m->n_units; u++) {
        const wc_affinity_unit *au = &m->units[u];
        uint64_t sum = 0;
        if (au->n == 0) {
            wm_errbuf(err, errlen, "affinity unit %zu is empty", u);
            return SMP_EINVAL;
        }
        for (uint32_t k = 0; k < au->n; k++) {
            uint32_t o = au->objects[k];
            if (o >= m->n_objects) {
                wm_errbuf(err, errlen, "affinity unit %zu: object index %u does not exist", u, o);
                return SMP_EINVAL;
            }
            if (m->objects[o].unit != WC_NONE) {
                wm_errbuf(err, errlen, "object '%s' is in two affinity units", m->objects[o].key);
                return SMP_EINVAL;
            }
            m->objects[o].unit = (uint32_t)u;
            if (m->objects[o].bytes > UINT64_MAX - sum) {
                wm_errbuf(err, errlen, "affinity unit %zu: size overflows", u);
                return SMP_EINVAL;
            }
            sum += m->objects[o].bytes;
        }
        if (sum != au->logical_bytes) {
            wm_errbuf(err, errlen, "affinity unit %zu says %llu logical bytes, its objects hold "
                    "%llu", u, (unsigned long long)au->logical_bytes, (unsigned long long)sum);
            return SMP_EINVAL;
        }
    }
    for (size_t i = 0; i < m->n_objects; i++) {
        if (m->objects[i].unit == WC_NONE) {
            wm_errbuf(err, errlen, "object '%s' is in no affinity unit", m->objects[i].key);
            return SMP_EINVAL;
        }
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        const wc_tensor *t = &m->tensors[i];
        if (t->frag_count == 0) continue;
        uint32_t unit = m->objects[m->fragments[t->frag_first].object].unit;
        for (size_t k = 1; k < t->frag_count; k++) {
            if (m->objects[m->fragments[t->frag_first + k].object].unit != unit) {
                wm_errbuf(err, errlen, "tensor '%s': its fragments span two affinity units",
                        t->name);
                return SMP_EINVAL;
            }
        }
    }
    return SMP_OK;
}

int wc_manifest_finalize(wc_manifest *m, char *err, size_t errlen)
{
    int rc;
    m->finalized_ = 0;
    /* Encoded manifests are already canonical: sort only when needed. */
    for (size_t i = 1; i < m->n_fragments; i++) {
        if (cmp_fragment(&m->fragments[i - 1], &m->fragments[i]) > 0) {
            qsort(m->fragments, m->n_fragments, sizeof *m->fragments, cmp_fragment);
            break;
        }
    }
    if ((rc = validate_identity_and_objects(m, err, errlen)) < 0) return rc;
    if ((rc = validate_tensors_and_aliases(m, err, errlen)) < 0) return rc;
    if ((rc = validate_fragments(m, err, errlen)) < 0) return rc;
    if ((rc = validate_units(m, err, errlen)) < 0) return rc;
    m->finalized_ = 1;
    return SMP_OK;
}

/* ---- encoding ------------------------------------------------------------- */

int wc_manifest_encode(const wc_manifest *m, uint8_t **out, size_t *out_len)
{
    int rc = SMP_ENOMEM;
    StoredWeightManifest msg = STORED_WEIGHT_MANIFEST__INIT;
    ManifestIdentity ident = MANIFEST_IDENTITY__INIT;
    ManifestTensor *tensors = NULL, **tensor_ptrs = NULL;
    ManifestFragment *frags = NULL, **frag_ptrs = NULL;
    ManifestAliasGroup *aliases = NULL, **alias_ptrs = NULL;
    ManifestObject *objects = NULL, **object_ptrs = NULL;
    ManifestAffinityUnit *units = NULL, **unit_ptrs = NULL;
    ManifestFileMetadata *metas = NULL, **meta_ptrs = NULL;
    uint8_t *buf = NULL;

    if (m == NULL || !m->finalized_) return SMP_ESTATE;
#define ALLOC_N(arr, ptrs, n)                                                 \
    do {                                                                      \
        arr = calloc((n) ? (n) : 1, sizeof *arr);                             \
        ptrs = calloc((n) ? (n) : 1, sizeof *ptrs);                           \
        if (arr == NULL || ptrs == NULL) goto free_messages;                  \
    } while (0)
    ALLOC_N(tensors, tensor_ptrs, m->n_tensors);
    ALLOC_N(frags, frag_ptrs, m->n_fragments);
    ALLOC_N(aliases, alias_ptrs, m->n_alias_groups);
    ALLOC_N(objects, object_ptrs, m->n_objects);
    ALLOC_N(units, unit_ptrs, m->n_units);
    ALLOC_N(metas, meta_ptrs, m->n_file_meta);
#undef ALLOC_N

    ident.tenant_id = m->identity.tenant_id;
    ident.namespace_id = m->identity.namespace_id;
    ident.resource_id = m->identity.resource_id;
    ident.revision = m->identity.revision;
    ident.weight_generation = m->identity.generation;
    msg.format_version = wc_manifest_n_plain(m) < m->n_tensors ? WC_MANIFEST_FORMAT_ATTACHMENTS
                                                               : WC_MANIFEST_FORMAT_VERSION;
    msg.identity = &ident;
    msg.group = m->group;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const wc_tensor *t = &m->tensors[i];
        manifest_tensor__init(&tensors[i]);
        tensors[i].name = t->name;
        tensors[i].dtype = (char *)wc_dtype_name(t->dtype);
        tensors[i].item_size = t->item_size;
        tensors[i].n_shape = t->ndim;
        tensors[i].shape = (uint64_t *)t->shape;
        tensors[i].attachment = t->attachment != 0;
        tensor_ptrs[i] = &tensors[i];
    }
    for (size_t i = 0; i < m->n_fragments; i++) {
        const wc_fragment *f = &m->fragments[i];
        uint32_t nd = m->tensors[f->tensor].ndim;
        manifest_fragment__init(&frags[i]);
        frags[i].tensor_index = f->tensor;
        frags[i].n_global_offset = nd;
        frags[i].global_offset = (uint64_t *)f->offset;
        frags[i].n_local_shape = nd;
        frags[i].local_shape = (uint64_t *)f->shape;
        frags[i].object_index = f->object;
        frags[i].object_offset = f->object_offset;
        frags[i].bytes = f->bytes;
        frag_ptrs[i] = &frags[i];
    }
    for (size_t i = 0; i < m->n_alias_groups; i++) {
        manifest_alias_group__init(&aliases[i]);
        aliases[i].n_tensor_index = m->alias_groups[i].n;
        aliases[i].tensor_index = m->alias_groups[i].tensors;
        alias_ptrs[i] = &aliases[i];
    }
    for (size_t i = 0; i < m->n_objects; i++) {
        manifest_object__init(&objects[i]);
        objects[i].key = m->objects[i].key;
        objects[i].bytes = m->objects[i].bytes;
        if (m->objects[i].has_sha256) {
            objects[i].sha256.data = (uint8_t *)m->objects[i].sha256;
            objects[i].sha256.len = 32;
        }
        objects[i].check_chunk_bytes = m->objects[i].chunk_bytes;
        objects[i].n_chunk_xxh3 = m->objects[i].n_chunks;
        objects[i].chunk_xxh3 = m->objects[i].chunk_xxh3;
        object_ptrs[i] = &objects[i];
    }
    for (size_t i = 0; i < m->n_units; i++) {
        manifest_affinity_unit__init(&units[i]);
        units[i].n_object_index = m->units[i].n;
        units[i].object_index = m->units[i].objects;
        units[i].logical_bytes = m->units[i].logical_bytes;
        unit_ptrs[i] = &units[i];
    }
    msg.n_tensors = m->n_tensors;
    msg.tensors = tensor_ptrs;
    msg.n_fragments = m->n_fragments;
    msg.fragments = frag_ptrs;
    msg.n_alias_groups = m->n_alias_groups;
    msg.alias_groups = alias_ptrs;
    msg.n_objects = m->n_objects;
    msg.objects = object_ptrs;
    msg.n_affinity_units = m->n_units;
    msg.affinity_units = unit_ptrs;
    for (size_t i = 0; i < m->n_file_meta; i++) {
        manifest_file_metadata__init(&metas[i]);
        metas[i].key = m->file_meta[i].key;
        metas[i].value = m->file_meta[i].value;
        meta_ptrs[i] = &metas[i];
    }
    msg.n_file_metadata = m->n_file_meta;
    msg.file_metadata = meta_ptrs;

    size_t len = stored_weight_manifest__get_packed_size(&msg);
    buf = malloc(len ? len : 1);
    if (buf == NULL) goto free_messages;
    stored_weight_manifest__pack(&msg, buf);
    *out = buf;
    *out_len = len;
    rc = SMP_OK;
free_messages:
    free(tensors);
    free(tensor_ptrs);
    free(frags);
    free(frag_ptrs);
    free(aliases);
    free(alias_ptrs);
    free(objects);
    free(object_ptrs);
    free(units);
    free(unit_ptrs);
    free(metas);
    free(meta_ptrs);
    return rc;
}

/* ---- decoding ------------------------------------------------------------- */

/* Move the unpacked message into m, checking what the builder cannot (dtype
 * names, item sizes, index ranges, dimension counts). SMP_EINVAL on a bad
 * message (with a message), SMP_ENOMEM. */
static int model_from_message(const StoredWeightManifest *msg, wc_manifest *m, char *err,
                              size_t errlen)
{
    int rc;
    wc_identity id;
    if (msg->format_version != WC_MANIFEST_FORMAT_VERSION &&
        msg->format_version != WC_MANIFEST_FORMAT_ATTACHMENTS) {
        wm_errbuf(err, errlen, "manifest format_version %u is not %u or %u", msg->format_version,
                WC_MANIFEST_FORMAT_VERSION, WC_MANIFEST_FORMAT_ATTACHMENTS);
        return SMP_EINVAL;
    }
    if (msg->identity == NULL) {
        wm_errbuf(err, errlen, "manifest has no identity");
        return SMP_EINVAL;
    }
    id.tenant_id = msg->identity->tenant_id;
    id.namespace_id = msg->identity->namespace_id;
    id.resource_id = msg->identity->resource_id;
    id.revision = msg->identity->revision;
    id.generation = msg->identity->weight_generation;
    if ((rc = wc_manifest_init(m, &id, err, errlen)) < 0) return rc;
    if (strcmp(m->group, msg->group) != 0) {
        wm_errbuf(err, errlen, "manifest group '%s' is not the identity's group '%s'",
                msg->group, m->group);
        return SMP_EINVAL;
    }
    for (size_t i = 0; i < msg->n_tensors; i++) {
        const ManifestTensor *mt = msg->tensors[i];
        wc_dtype dt = wc_dtype_from_name(mt->dtype, strlen(mt->dtype));
        if (dt == WC_DTYPE_INVALID) {
            wm_errbuf(err, errlen, "tensor '%s': unknown dtype '%s'", mt->name, mt->dtype);
            return SMP_EINVAL;
        }
        if (mt->item_size != wc_dtype_size(dt)) {
            wm_errbuf(err, errlen, "tensor '%s': item size %u is not %u for %s", mt->name,
                    mt->item_size, wc_dtype_size(dt), mt->dtype);
            return SMP_EINVAL;
        }
        if (mt->n_shape > WC_MAX_NDIM) {
            wm_errbuf(err, errlen, "tensor '%s': %zu dimensions, at most %d supported",
                    mt->name, mt->n_shape, WC_MAX_NDIM);
            return SMP_EINVAL;
        }
        rc = wc_manifest_add_tensor(m, mt->name, dt, (uint32_t)mt->n_shape, mt->shape, NULL);
        if (rc < 0) {
            wm_errbuf(err, errlen, "tensor '%s': cannot add", mt->name);
            return rc;
        }
        if (mt->attachment) {
            if (msg->format_version != WC_MANIFEST_FORMAT_ATTACHMENTS) {
                wm_errbuf(err, errlen, "attachment '%s' in a manifest of format_version %u",
                          mt->name, msg->format_version);
                return SMP_EINVAL;
            }
            m->tensors[m->n_tensors - 1].attachment = 1;
        }
    }
    for (size_t i = 0; i < msg->n_objects; i++) {
        if ((rc = wc_manifest_add_object(m, msg->objects[i]->key, msg->objects[i]->bytes,
                                         NULL)) < 0) {
            wm_errbuf(err, errlen, "object %zu: cannot add", i);
            return rc;
        }
        const ManifestObject *mo = msg->objects[i];
        if (mo->sha256.len != 0 && mo->sha256.len != 32) {
            wm_errbuf(err, errlen, "object '%s': sha256 has %zu bytes", mo->key, mo->sha256.len);
            return SMP_EINVAL;
        }
        rc = wc_manifest_set_object_check(m, (uint32_t)i, mo->sha256.len ? mo->sha256.data : NULL,
                                          mo->check_chunk_bytes, mo->chunk_xxh3,
                                          mo->n_chunk_xxh3);
        if (rc < 0) {
            wm_errbuf(err, errlen, "object '%s': %zu chunk checksums of %llu bytes do not fit "
                    "its %llu bytes", mo->key, mo->n_chunk_xxh3,
                    (unsigned long long)mo->check_chunk_bytes, (unsigned long long)mo->bytes);
            return rc;
        }
    }
    for (size_t i = 0; i < msg->n_fragments; i++) {
        const ManifestFragment *mf = msg->fragments[i];
        if (mf->tensor_index >= m->n_tensors) {
            wm_errbuf(err, errlen, "fragment %zu: tensor index %u does not exist", i,
                    mf->tensor_index);
            return SMP_EINVAL;
        }
        const wc_tensor *t = &m->tensors[mf->tensor_index];
        if (mf->n_global_offset != t->ndim || mf->n_local_shape != t->ndim) {
            wm_errbuf(err, errlen, "tensor '%s': fragment has %zu offsets and %zu extents for "
                    "%u dimensions", t->name, mf->n_global_offset, mf->n_local_shape, t->ndim);
            return SMP_EINVAL;
        }
        rc = wc_manifest_add_fragment(m, mf->tensor_index, mf->global_offset, mf->local_shape,
                                      mf->object_index, mf->object_offset, mf->bytes);
        if (rc < 0) return rc;
    }
    for (size_t i = 0; i < msg->n_alias_groups; i++) {
        const ManifestAliasGroup *ag = msg->alias_groups[i];
        if (ag->n_tensor_index >= WC_NONE) return SMP_EINVAL;
        rc = wc_manifest_add_alias_group(m, ag->tensor_index, (uint32_t)ag->n_tensor_index);
        if (rc < 0) return rc;
    }
    for (size_t i = 0; i < msg->n_affinity_units; i++) {
        const ManifestAffinityUnit *au = msg->affinity_units[i];
        if (au->n_object_index >= WC_NONE) return SMP_EINVAL;
        rc = wc_manifest_add_unit(m, au->object_index, (uint32_t)au->n_object_index,
                                  au->logical_bytes);
        if (rc < 0) return rc;
    }
    for (size_t i = 0; i < msg->n_file_metadata; i++) {
        const ManifestFileMetadata *fm = msg->file_metadata[i];
        rc = wc_manifest_add_file_meta(m, fm->key, fm->value, err, errlen);
        if (rc < 0) return rc;
    }
    return wc_manifest_finalize(m, err, errlen);
}

int wc_manifest_decode(const uint8_t *buf, size_t len, wc_manifest *m, char *err,
                       size_t errlen)
{
    int rc;
    memset(m, 0, sizeof *m);
    StoredWeightManifest *msg = stored_weight_manifest__unpack(NULL, len, buf);
    if (msg == NULL) {
        wm_errbuf(err, errlen, "manifest: %zu bytes do not decode as a StoredWeightManifest",
                len);
        return SMP_EPROTO;
    }
    rc = model_from_message(msg, m, err, errlen);
    if (rc < 0) {
        wc_manifest_free(m);
        if (rc == SMP_EINVAL) rc = SMP_EPROTO;
    }
    stored_weight_manifest__free_unpacked(msg, NULL);
    return rc;
}

void wc_manifest_sha256(const uint8_t *buf, size_t len, uint8_t out[32])
{
    unsigned int n = 32;
    EVP_Digest(buf, len, out, &n, EVP_sha256(), NULL);
}
