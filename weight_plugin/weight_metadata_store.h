/* weight_metadata_store.h -- the weight plugin's in-memory tables.
 *
 * The revision store is the one authority the management RPCs, the
 * lifecycle tick, OpLog replay and the snapshot section all read and change:
 * revisions by identity (hash) with a reverse index from group key to
 * revision and an order by identity (for listing), operations by id (ended
 * ones stay queryable), leases by id, and the next-id counters. Every change
 * goes through one of the apply functions, which take the complete
 * post-mutation state a record carries; the live path calls them from the
 * OpLog durable callback and replay calls them with the decoded record, so
 * both produce the same tables. Nothing here calls the host.
 *
 * Pointers returned by the lookups are borrowed until the next apply, load or
 * free of the store. */
#ifndef WEIGHT_METADATA_STORE_H
#define WEIGHT_METADATA_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "weight_management.h"
#include "wm_codec.h"

typedef struct wm_store wm_store;

/* Counts kept current by every apply (metrics read them). */
typedef struct wm_store_stats {
    uint64_t by_availability[6]; /* indexed by wm_availability */
    uint64_t by_residency[5];    /* indexed by wm_residency */
    uint64_t active_operations;  /* revisions naming an active operation */
    uint64_t operations;         /* operation records, ended ones included */
    uint64_t leases;             /* lease records */
    uint64_t open_claims;        /* lineages whose claim is neither COMMITTED nor ABORTED */
    uint64_t revision_changes;   /* revisions inserted, replaced or removed so far (only grows):
                                  * a sweep that rests until something changes compares it */
} wm_store_stats;

/* An empty store. SMP_ENOMEM. */
int wm_store_create(wm_store **out);
void wm_store_free(wm_store *st);

/* Lookups; NULL when absent. */
const wm_revision *wm_store_get(const wm_store *st, const wm_identity *id);
const wm_revision *wm_store_get_group(const wm_store *st, const char *group_key);
/* Record an access of the revision at access_ms in memory only (no record,
 * no new metadata generation; last_access_ms never goes back). 1 when it
 * moved, 0 when the revision is absent or already accessed as late. The
 * caller persists it (wm_access.c). */
int wm_store_touch(wm_store *st, const wm_identity *id, uint64_t access_ms);
/* The sealed affinity summary (empty while IMPORTING); NULL when absent. */
const wm_affinity *wm_store_affinity(const wm_store *st, const wm_identity *id);
/* The revision and, in *aff, its sealed affinity summary from one hash
 * lookup (what wm_store_get then wm_store_affinity answer with two), and in
 * *readable_at the revision's slot for the host version
 * (smp_host_api.objects_loss_version, else objects_version) at which
 * weight_is_exist last found every
 * key of it complete and readable: the caller reads and writes it; 0 means
 * none, and every apply of the revision sets it back to 0. NULL with *aff
 * and *readable_at NULL when absent. Borrowed until the next apply. */
const wm_revision *wm_store_get_exist(wm_store *st, const wm_identity *id,
                                      const wm_affinity **aff, uint64_t **readable_at);
const wm_operation *wm_store_operation(const wm_store *st, uint64_t op_id);
const wm_lease *wm_store_lease(const wm_store *st, uint64_t lease_id);

/* Revisions in identity order (wm_identity_cmp): count, the i-th, and the
 * index of the first revision not below id (count when none). */
size_t wm_store_revision_count(const wm_store *st);
const wm_revision *wm_store_revision_at(const wm_store *st, size_t i);
size_t wm_store_revision_lower_bound(const wm_store *st, const wm_identity *id);

/* Where a walk of the identity order goes on after the revision id: the
 * index of the first revision above id. A walk that noted where its last
 * step ended (wm_store_walk_note, a few walks at a time) is found there
 * with one compare, where a search costs some 17 compares at 100,000
 * revisions, each a cache miss at a random place; any other id is searched
 * for. Exact either way: a noted place that moved (revisions added or
 * removed before it) no longer holds id and is passed over. *walk gets the
 * walk found (-1: none), for the note of where this step ends. */
size_t wm_store_revision_after(const wm_store *st, const wm_identity *id, int *walk);
/* Note that a walk's step ended at index i: in walk's slot (from
 * wm_store_revision_after), or in the oldest one when walk is -1. */
void wm_store_walk_note(wm_store *st, size_t i, int walk);

/* Cache hints for a walk of the identity order (LIST reads every field and
 * key of each row it returns; at 100,000 revisions each row is a cache miss
 * of its own). wm_store_prefetch_fields asks for the fields of the revision
 * at i without reading it; wm_store_prefetch_keys reads those fields (ask
 * for them a few rows earlier) and asks for its keys and identity strings.
 * Neither waits for memory nor changes anything; i past the end is a no-op. */
void wm_store_prefetch_fields(const wm_store *st, size_t i);
void wm_store_prefetch_keys(const wm_store *st, size_t i);

/* Operations (ended ones included) in id order: count, the i-th, first
 * index with id >= op_id. */
size_t wm_store_operation_count(const wm_store *st);
const wm_operation *wm_store_operation_at(const wm_store *st, size_t i);
size_t wm_store_operation_lower_bound(const wm_store *st, uint64_t op_id);

/* Leases in id order: count, the i-th, first index with id >= lease_id. */
size_t wm_store_lease_count(const wm_store *st);
const wm_lease *wm_store_lease_at(const wm_store *st, size_t i);
size_t wm_store_lease_lower_bound(const wm_store *st, uint64_t lease_id);

/* Reserve a fresh id (never handed out twice by this process; replay and
 * load keep the counters above every id they see). */
uint64_t wm_store_reserve_operation_id(wm_store *st);
uint64_t wm_store_reserve_lease_id(wm_store *st);

void wm_store_stats_get(const wm_store *st, wm_store_stats *out);

/* Apply one record (the complete post-mutation state). Idempotent: a record
 * whose metadata generation is below the stored one changes nothing, an
 * equal one rewrites the same state. The revision's lease_count is derived
 * from the lease table, never trusted from the record. An upsert without an
 * affinity summary keeps the one held, which must match the revision. An
 * upsert may not change the sealed manifest reference and payload summary of
 * a revision past IMPORTING, leave the revision's active operation without
 * carrying it ended, or carry an operation another revision owns. WM_OK;
 * WM_EINVALID_ARGUMENT with a sentence when the result would break an
 * invariant (nothing changed); SMP_ENOMEM. */
int wm_store_apply_upsert(wm_store *st, const wm_metadata_upsert *u, char *msg, size_t cap);
/* The checks of wm_store_apply_upsert alone, changing nothing: what the live
 * path runs before it appends a record, so that no durable record is one the
 * store (and so replay after a restart) would refuse. */
int wm_store_check_upsert(const wm_store *st, const wm_metadata_upsert *u, char *msg, size_t cap);
/* Drops the revision (unless stored above d's generation), the listed
 * operations and any lease naming it. Absent: no-op. A listed operation of
 * another revision: WM_EINVALID_ARGUMENT, nothing changed. With reason
 * WM_DEL_OPERATIONS_EXPIRED only the listed operations go, each ended and
 * of d's revision (present or not; else WM_EINVALID_ARGUMENT), and the
 * revision stays. */
int wm_store_apply_delete(wm_store *st, const wm_metadata_delete *d, char *msg, size_t cap);
/* The checks of wm_store_apply_delete alone (see wm_store_check_upsert). */
int wm_store_check_delete(const wm_store *st, const wm_metadata_delete *d, char *msg, size_t cap);
/* Grant or renew. The revision must exist, be READY or DEGRADED and be at or
 * above the lease's generation; a renewal keeps the generation and grant
 * time the lease was granted with (its fence). Else WM_EINVALID_ARGUMENT.
 * A new lease moves the revision's last_access_ms to its grant time (an
 * access recorded without a new metadata generation). An upsert may carry
 * a lease too (has_lease: granted by the same mutation, at the record's
 * generation, on a READY or DEGRADED revision). */
int wm_store_apply_lease_upsert(wm_store *st, const wm_lease *l, char *msg, size_t cap);
/* The checks of wm_store_apply_lease_upsert alone (see wm_store_check_upsert). */
int wm_store_check_lease_upsert(const wm_store *st, const wm_lease *l, char *msg, size_t cap);
/* End a lease. Absent: no-op. */
int wm_store_apply_lease_delete(wm_store *st, const wm_lease_delete *d, char *msg, size_t cap);

/* Apply a lineage claim record (type 12) to its lineage's entry, creating the
 * entry on first use, by the rules of wm_lineage_claim_step (weight_lineage.h):
 * a duplicate is a no-op, a phase out of order, a second open successor or a
 * lower watermark is refused with WM_EINVALID_ARGUMENT (nothing changed);
 * SMP_ENOMEM. */
int wm_store_apply_claim(wm_store *st, const wm_lineage_claim *c, char *msg, size_t cap);

/* The lineage table, in lineage order: lookup (NULL when absent), count and
 * the i-th entry (NULL past the end). */
const wm_lineage_entry *wm_store_lineage(const wm_store *st, const wm_lineage *lin);
size_t wm_store_lineage_count(const wm_store *st);
const wm_lineage_entry *wm_store_lineage_at(const wm_store *st, size_t i);

/* Decode a record of type 8-12 and apply it. SMP_EPROTO (undecodable or
 * invalid), SMP_ENOTSUP (an unknown type), or what the apply returns. */
int wm_store_replay(wm_store *st, uint16_t type, const uint8_t *buf, size_t len, char *msg,
                    size_t cap);

/* The weight_metadata section. save: *out malloc'ed (caller frees). load:
 * an empty buffer is an empty table; anything invalid fails with SMP_EPROTO
 * and a sentence, leaving the store unchanged. Lineage entries (claim and
 * watermark) are saved and loaded with the rest. The reverse index and the order are rebuilt from the records. */
int wm_store_save(const wm_store *st, uint8_t **out, size_t *out_len, char *msg, size_t cap);
int wm_store_load(wm_store *st, const uint8_t *buf, size_t len, char *msg, size_t cap);

#endif /* WEIGHT_METADATA_STORE_H */
