/* wm_test_records.h -- valid weight records for the test_wm_* programs.
 *
 * Builders of a correct identity, a sealed READY revision with its affinity
 * summary (one payload per unit, digests computed the way the master checks
 * them), an operation, a lease and an identity's wire form, so each test
 * starts from a record that passes every check and changes exactly the
 * field it is about. Header-only (static functions); the unit test glob
 * picks up test_*.c only. */
#ifndef WM_TEST_RECORDS_H
#define WM_TEST_RECORDS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_management.h"
#include "weight_metadata_store.h"
#include "weight_rpc.pb-c.h"

/* A copy of s that lives as long as the test program (an identity's strings
 * are borrowed, weight_management.h): one node per string, found again,
 * never freed (still reachable, which valgrind_unit.sh allows). */
typedef struct wmt_str_node {
    struct wmt_str_node *next;
    char s[];
} wmt_str_node;

static inline const char *wmt_intern(const char *s)
{
    static wmt_str_node *buckets[1024];
    size_t h = 5381;
    for (const char *c = s; *c; c++) h = h * 33 + (unsigned char)*c;
    wmt_str_node **b = &buckets[h % 1024], *n = *b;
    while (n != NULL && strcmp(n->s, s) != 0) n = n->next;
    if (n == NULL) {
        n = malloc(sizeof(*n) + strlen(s) + 1);
        if (n == NULL) abort();
        strcpy(n->s, s);
        n->next = *b;
        *b = n;
    }
    return n->s;
}

/* Storage for the identity strings of one decoded lease, lease end or
 * claim (wm_decode_lease_upsert and the others): a ring of 16, so a test may
 * hold that many decoded records at once. */
static inline wm_identity_buf *wmt_ids_next(void)
{
    static wm_identity_buf ring[16];
    static unsigned at;
    return &ring[at++ % 16];
}

/* Point id's strings at interned copies of id's (see wmt_intern). */
static inline void wmt_identity_keep(wm_identity *id)
{
    id->tenant_id = wmt_intern(id->tenant_id);
    id->ns = wmt_intern(id->ns);
    id->resource_id = wmt_intern(id->resource_id);
    id->revision = wmt_intern(id->revision);
}

static inline void wmt_identity(wm_identity *id, const char *resource, uint64_t gen)
{
    wm_identity_buf b;
    int rc = wm_identity_set(&b, "tenant-a", "llm", resource, "main", gen);
    if (rc != WM_OK) abort();
    *id = b.id;
    wmt_identity_keep(id);
}

/* Point r's group and manifest keys at storage that lives as long as the
 * test program (a revision's keys are borrowed, weight_management.h): one
 * node per identity, found again by its group key, never freed (still
 * reachable, which valgrind_unit.sh allows). */
typedef struct wmt_keys_node {
    struct wmt_keys_node *next;
    wm_rev_keys keys;
} wmt_keys_node;

static inline void wmt_bind_keys(wm_revision *r)
{
    static wmt_keys_node *buckets[4096];
    wm_rev_keys k;
    if (wm_revision_bind_keys(r, &k) != WM_OK) abort();
    size_t h = 5381;
    for (const char *c = k.group_key; *c; c++) h = h * 33 + (unsigned char)*c;
    wmt_keys_node **b = &buckets[h % 4096], *n = *b;
    while (n != NULL && strcmp(n->keys.group_key, k.group_key) != 0) n = n->next;
    if (n == NULL) {
        n = malloc(sizeof(*n));
        if (n == NULL) abort();
        n->keys = k;
        n->next = *b;
        *b = n;
    }
    r->group_key = n->keys.group_key;
    r->manifest_key = n->keys.manifest_key;
}

/* The wire form of w for a request (borrows w's strings). */
static inline void wmt_pb_identity(Wmrpc__WeightIdentity *id, const wm_identity *w)
{
    wmrpc__weight_identity__init(id);
    id->tenant = (char *)w->tenant_id;
    id->namespace_id = (char *)w->ns;
    id->resource_id = (char *)w->resource_id;
    id->revision = (char *)w->revision;
    id->generation = w->weight_generation;
}

/* A READY + HOT revision of n units (unit i: payload i, bytes[i]) and its
 * summary in *aff (caller clears it). */
static inline void wmt_ready_revision(wm_revision *r,
                                      wm_affinity *aff,
                                      const char *resource,
                                      uint64_t gen,
                                      const uint64_t *bytes,
                                      size_t n)
{
    char **keys = calloc(n, sizeof(char *));
    memset(r, 0, sizeof(*r));
    wmt_identity(&r->id, resource, gen);
    r->policy = wm_policy_default();
    r->availability = WM_AVAIL_READY;
    r->residency = WM_RES_HOT;
    r->observed_hot_ratio = 1.0;
    r->metadata_generation = 1;
    wmt_bind_keys(r);
    memset(r->manifest_sha256, 0xAB, sizeof(r->manifest_sha256));
    aff->n_units = n;
    aff->borrowed = 0;
    aff->units = calloc(n, sizeof(*aff->units));
    for (size_t i = 0; i < n; i++) {
        char key[WM_KEY_MAX + 1];
        if (wm_payload_key(&r->id, i, key, sizeof(key)) < 0) abort();
        aff->units[i].members = calloc(1, sizeof(char *));
        aff->units[i].members[0] = strdup(key);
        aff->units[i].n_members = 1;
        aff->units[i].logical_bytes = bytes[i];
        keys[i] = aff->units[i].members[0];
        r->logical_bytes += bytes[i];
    }
    r->payload_count = n;
    r->affinity_count = n;
    if (wm_payload_keys_digest((const char *const *)keys, n, r->payload_keys_sha256) < 0) abort();
    if (wm_affinity_digest(aff, r->affinity_sha256) < 0) abort();
    r->created_ms = 1000;
    r->updated_ms = 2000;
    r->last_access_ms = 2000;
    free(keys);
}

/* Apply READY revisions "<prefix><i>" (i from .. to - 1, "%07ld"), one
 * 16-byte unit each, straight into the store st; WM_OK or the first
 * refusal (its reason in msg). */
static inline int wmt_seed_ready(wm_store *st, const char *prefix, long from, long to, char *msg,
                                 size_t cap)
{
    static const uint64_t bytes[1] = {16};
    char name[64];
    for (long i = from; i < to; i++) {
        wm_affinity aff = {0};
        wm_metadata_upsert u;
        memset(&u, 0, sizeof(u));
        snprintf(name, sizeof(name), "%s%07ld", prefix, i);
        wmt_ready_revision(&u.revision, &aff, name, 1, bytes, 1);
        u.has_affinity = 1;
        u.affinity = aff;
        int rc = wm_store_apply_upsert(st, &u, msg, cap);
        wm_affinity_clear(&aff);
        if (rc != WM_OK) return rc;
    }
    return WM_OK;
}

/* An IMPORTING revision: nothing sealed yet. */
static inline void wmt_importing_revision(wm_revision *r, const char *resource, uint64_t gen)
{
    memset(r, 0, sizeof(*r));
    wmt_identity(&r->id, resource, gen);
    r->policy = wm_policy_default();
    r->availability = WM_AVAIL_IMPORTING;
    r->residency = WM_RES_UNKNOWN;
    r->metadata_generation = 1;
    wmt_bind_keys(r);
    r->created_ms = 1000;
    r->updated_ms = 1000;
}

/* A RUNNING MIGRATING operation towards COLD on rev (made its active one). */
static inline void wmt_migration(wm_operation *op, wm_revision *rev, uint64_t id)
{
    memset(op, 0, sizeof(*op));
    op->id = id;
    op->kind = WM_OPK_MIGRATING;
    op->id_of = rev->id;
    op->target = WM_RES_COLD;
    op->members_total = rev->payload_count;
    op->bytes_total = rev->logical_bytes;
    op->state = WM_OPS_RUNNING;
    op->created_ms = 2000;
    op->updated_ms = 2000;
    rev->operation_id = id;
}

static inline void wmt_lease(wm_lease *l, const wm_revision *rev, uint64_t id)
{
    memset(l, 0, sizeof(*l));
    l->id = id;
    l->id_of = rev->id;
    l->metadata_generation = rev->metadata_generation;
    l->granted_ms = 5000;
    l->expiry_ms = 35000;
}

static inline void wmt_claim(wm_lineage_claim *c, const char *resource)
{
    memset(c, 0, sizeof(*c));
    strcpy(c->request_id, "rollout-2026-09-11-001");
    wmt_identity(&c->base, resource, 1);
    wmt_identity(&c->target, resource, 2);
    c->mode = WM_UPSERT_PUT_FIRST;
    c->phase = WM_PHASE_IMPORTING_TARGET;
    c->expected_metadata_generation = 3;
    c->committed_watermark = 0;
    c->created_ms = 100;
    c->updated_ms = 200;
}

#endif /* WM_TEST_RECORDS_H */
