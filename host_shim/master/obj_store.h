/* obj_store.h -- the master's metadata state for objects, replicas, groups,
 * tenants and memory segments, and the encoding of the host's OpLog records.
 *
 * An obj_store is pure in-memory state owned by the master's loop thread: no
 * I/O, no threads, no locks. The master drives it in the durable-before-
 * visible order: a prepare function validates a mutation against the current
 * state and encodes the OpLog record that carries it (no state change); the
 * master appends the record; once it is durable the master hands it to
 * obj_apply_record(), which changes the state; then the client is answered.
 * Recovery and standbys apply the same records. Applying is deterministic and
 * idempotent: a record carries the complete post-mutation state of what it
 * touches, so applying it twice gives the state of applying it once. The one
 * delta, an add-replica record, adds its replica only when the object does
 * not have it yet, so it is idempotent too.
 *
 * Soft state is not logged: in-flight puts (put start reserves a range of
 * segment memory; the put ends with a PUT_END record or is revoked or
 * cleaned up when stale; only a master that stops logs the ones still open,
 * in one PUT_HANDOFF record), replica reservations (obj_reserve_replica reserves
 * a range for one more memory replica of a complete object; an add-replica
 * record consumes it, or it is released or cleaned up when stale), read
 * leases (granted by obj_get_replica_list, they protect an object from
 * eviction and removal until they expire),
 * holds (see obj_hold_record) and last-access refreshes by reads (the access
 * time is logged only with records and saved in snapshots: an LRU hint).
 *
 * Records race with each other between prepare and apply; apply resolves
 * this deterministically, so the active master and every replay agree:
 *   - Every object has an incarnation (put_id) assigned at put start. A
 *     PUT_END about an older incarnation than the current one is a no-op;
 *     an update-only PUT_END (pin, replica list, eviction to cold) applies
 *     only to its own incarnation and never re-creates a removed object;
 *     a REMOVE entry removes its key only while it is the same incarnation.
 *   - A memory replica that cannot exist when its record is applied (its
 *     segment was unmounted, the range is taken) is left out and counted in
 *     obj_stats.replicas_dropped; an update-only record never adds a memory
 *     replica the object does not already have -- except an add-replica
 *     record (PUT_END with add_replica set), which adds exactly its one
 *     memory replica to its own incarnation and touches nothing else.
 *   - A SEGMENT_UPDATE to a smaller capacity applies only when nothing
 *     occupies the bytes it cuts (else it is a no-op: a range was taken
 *     there since it was prepared); a larger one always applies.
 *   - In-flight puts and replica reservations are soft state, so they never
 *     change what a record does: a memory replica whose range an in-flight
 *     put holds takes it (the put is cancelled, obj_stats.puts_cancelled;
 *     its put end then answers SMP_ENOTFOUND), and likewise for a
 *     reservation of another key or incarnation (obj_stats.
 *     reservations_cancelled). A PUT_END whose put was revoked or cleaned
 *     up meanwhile still applies, and so does an add-replica record whose
 *     reservation was released or cleaned up (it takes the range if it is
 *     free). Use a stale timeout well above the OpLog's worst durable
 *     latency all the same.
 *
 * Record types (host range 1..7, encoding version OBJ_REC_ENCVER; payloads
 * are the messages of proto/host_records.proto):
 *   1 PUT_END         ObjectRecord: the whole object after the change. Written
 *                     by put end, and also by pin changes, replica-list
 *                     changes and evictions that keep a cold replica. With
 *                     add_replica set (obj_prepare_add_replica) it is a
 *                     delta: add that one memory replica to incarnation
 *                     put_id, keep everything else as it is at apply.
 *   2 PUT_REVOKE      PutRevokeRecord: frees the range of an in-flight put.
 *     PUT_HANDOFF     type 2 at encoding version OBJ_REC_HANDOFF_ENCVER,
 *                     PutHandoffRecord: the in-flight puts a master that
 *                     stops hands on (obj_prepare_put_handoff), or the one
 *                     large put whose start it is about to answer
 *                     (obj_prepare_put_open). Apply takes each one's range
 *                     as an in-flight put, so the put end its writer sends
 *                     next completes on the master that replays it, and
 *                     nobody else is given the range (a put an older
 *                     handoff gave, in its way, is dropped: its writer had
 *                     gone stale where this one was written; a durable
 *                     object over its range cancels it unscrubbed). A
 *                     build that replays only encoding version 1 stops on
 *                     it (SMP_EPROTO): in HA it is written only when every
 *                     registered master advertises that it replays it.
 *   3 REMOVE          RemoveRecord: keys to remove (absent keys are no-ops).
 *   4 reserved
 *   5 SEGMENT_MOUNT   SegmentRecord: a segment and its capacity (remounting
 *                     the same id on the same node grows it; on another
 *                     node it is a conflict: SMP_ESTATE).
 *   6 SEGMENT_UNMOUNT SegmentUnmountRecord: drops the segment and every
 *                     memory replica in it (objects are kept, see below).
 *   7 SEGMENT_UPDATE  UpdateRecord: a segment's new capacity, or a
 *                     group's managed flag and owner (oneof). A managed
 *                     group record without an owner (written before owners
 *                     existed) belongs to OBJ_OWNER_DEFAULT, the weight
 *                     plugin: it was the only plugin that managed groups.
 *     WRITE_ZONES     type 7 at encoding version OBJ_REC_ZONES_ENCVER,
 *                     WriteZoneRecord: per segment, the ranges where this
 *                     master's writers of puts it has no record of may be
 *                     copying (obj_prepare_write_zones; see
 *                     obj_store_zones.c). Apply replaces the segment's
 *                     zones; a store that leads next holds their free
 *                     bytes back for a stale put's time. Like PUT_HANDOFF,
 *                     an older build stops on it, and in HA it is written
 *                     only when every registered master replays it.
 *
 * Choices made here:
 *   - A tenant is an explicit field of an object ("" = none), not a part of
 *     the key; listing and usage accounting can filter by it.
 *   - Keys are 1..OBJ_KEY_MAX bytes of valid UTF-8 without NUL; group names
 *     are 0..OBJ_GROUP_MAX bytes, tenants, node and segment ids
 *     0..OBJ_NAME_MAX (ids non-empty), all valid UTF-8.
 *   - The segment allocator is first fit over a free list sorted by offset,
 *     with coalescing on free. Every range starts at a multiple of OBJ_ALIGN
 *     (64 bytes) and occupies the replica length rounded up to OBJ_ALIGN (a
 *     0-byte object still occupies OBJ_ALIGN). "used" counts occupied bytes.
 *   - Ordered access (objects by key, group members by key, segments by id)
 *     uses skip lists, so a listing after a cursor costs O(log n + page).
 *   - Unmounting a segment drops the memory replicas in it; an object left
 *     without replicas stays (unreadable) so no managed group loses a member
 *     behind the plugin's back. Unmount is rare and scans the objects.
 *   - Guard rule: a managed group belongs to one plugin (its owner, kept in
 *     the records and the snapshot). While the owner is not active (absent
 *     from the config, disabled, or failed to load) the store refuses every
 *     guarded action on the group's members itself: removal by key, prefix
 *     or all, eviction, stale-put cleanup, put into and overwrite. With the
 *     owner active, its guard alone decides for its groups (no other
 *     plugin's guard is asked, so none can allow or veto them); an owner
 *     without a guard gets the host's rule: no eviction, partial removal,
 *     put into or overwrite (removing a whole managed group by prefix is not
 *     partial and is allowed when nothing in it is leased). Objects in no
 *     managed group are asked of every active guard (any veto vetoes). A
 *     veto is SMP_EVETO for an explicit call and a skip for eviction and
 *     cleanup. Both kinds of refusal are counted per reason in obj_stats.
 *
 * Strings the store hands out (keys, replica views, object info) are borrowed
 * until the next call that changes the store. */
#ifndef HOST_OBJ_STORE_H
#define HOST_OBJ_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"

#define OBJ_KEY_MAX 1024   /* bytes of a key */
#define OBJ_GROUP_MAX 1024 /* bytes of a group name */
#define OBJ_NAME_MAX 256   /* bytes of a tenant, node id or segment id */
#define OBJ_PATH_MAX 4096  /* bytes of a cold replica's path */
#define OBJ_ALIGN 64       /* allocation alignment and granularity */
#define OBJ_REMOVE_BATCH 1024 /* keys per REMOVE record from a bulk plan */
#define OBJ_REPLICAS_MAX 1024 /* replicas of one object */
#define OBJ_SNAPSHOT_FORMAT 1
/* The owner of a managed group recorded without one: the weight plugin's
 * descriptor name. */
#define OBJ_OWNER_DEFAULT "weight_mgmt"

/* OpLog record types of the host (see the mapping above). */
#define OBJ_REC_PUT_END 1
#define OBJ_REC_PUT_REVOKE 2
#define OBJ_REC_REMOVE 3
#define OBJ_REC_SEGMENT_MOUNT 5
#define OBJ_REC_SEGMENT_UNMOUNT 6
#define OBJ_REC_SEGMENT_UPDATE 7
#define OBJ_REC_ENCVER 1 /* the encoding version written and replayed */
#define OBJ_REC_HANDOFF_ENCVER 2 /* type 2's version that is a PUT_HANDOFF */
#define OBJ_REC_ZONES_ENCVER 2   /* type 7's version that is a WRITE_ZONES */
/* A put under this many bytes starts without a record of its own; with
 * zones on (obj_zones_enable) it is placed in a write zone. */
#define OBJ_ZONE_PUT_MAX (1u << 20)

typedef struct obj_store obj_store;

typedef enum obj_replica_status {
    OBJ_REPLICA_PENDING = 0,
    OBJ_REPLICA_COMPLETE = 1,
    OBJ_REPLICA_FAILED = 2
} obj_replica_status;

/* A replica as the store reports it, or as a caller describes one. */
typedef struct obj_replica {
    smp_replica_kind kind;
    obj_replica_status status;
    const char *node;
    const char *segment; /* MEMORY only (NULL for COLD) */
    uint64_t offset;     /* MEMORY only */
    uint64_t length;
    const char *path;    /* COLD only (NULL for MEMORY) */
} obj_replica;

/* The plugins behind the guard, asked at every decision (so loading,
 * disabling or unloading a plugin is followed at once).
 *   check(ctx, owner, req, &asked): owner is the plugin that owns the
 *     object's managed group, or NULL for an object in no managed group; it
 *     asks that plugin's guard only (NULL: every active plugin's guard) and
 *     answers SMP_GUARD_ALLOW or SMP_GUARD_VETO (any other value is a veto),
 *     with asked set to the number of guards asked.
 *   active(ctx, owner): 1 when the plugin named owner is loaded and enabled.
 * A NULL check asks nobody (asked 0); a NULL active counts every owner as
 * active (a store without a plugin host, as in unit tests). */
typedef struct obj_guard_ops {
    int (*check)(void *ctx, const char *owner, const smp_guard_request *req, int *asked);
    int (*active)(void *ctx, const char *owner);
    void *ctx;
} obj_guard_ops;

/* One encoded record, ready for the OpLog. buf is malloc'd (owned). held,
 * when not NULL, is the decoded form of buf, built while encoding (owned;
 * obj_hold_record takes it instead of decoding buf again). */
typedef struct obj_held obj_held;
typedef struct obj_record {
    uint16_t type;
    uint16_t encver;
    uint8_t *buf;
    size_t len;
    obj_held *held;
} obj_record;

/* Records a bulk plan produced, to append in order. Zero-initialise. */
typedef struct obj_record_list {
    obj_record *recs;
    size_t n;
    size_t cap;
} obj_record_list;

void obj_record_free(obj_record *r);           /* frees buf and held, zeroes; NULL ok */
void obj_record_list_free(obj_record_list *l); /* frees all, zeroes; NULL ok */

typedef struct obj_stats {
    uint64_t objects_by_type[3];  /* complete objects by smp_data_type */
    uint64_t bytes_by_type[3];    /* their logical sizes */
    uint64_t replicas_by_kind[2]; /* complete replicas by smp_replica_kind */
    uint64_t replica_bytes_by_kind[2];
    uint64_t puts_in_flight;
    /* Memory replicas of applied records left out because they could not
     * exist (segment gone, range taken): a record that lost a race. */
    uint64_t replicas_dropped;
    /* In-flight puts cancelled because an applied record claimed their range. */
    uint64_t puts_cancelled;
    /* Puts a PUT_HANDOFF (or a snapshot) gave this store that were still
     * open at its first sweep, when it leads (a standby takes every large
     * put's and lets its put end consume it: none of those counts), and
     * those it could not take (the range or the key was taken meanwhile). */
    uint64_t puts_taken_over;
    uint64_t puts_not_taken_over;
    uint64_t memory_used;
    uint64_t memory_capacity;
    /* Refusals per smp_guard_reason (index 1..SMP_GUARD_REASON_MAX). */
    uint64_t guard_vetoes[SMP_GUARD_REASON_MAX + 1];  /* by the plugin guard */
    uint64_t host_refusals[SMP_GUARD_REASON_MAX + 1]; /* by the host rule */
    /* Replica reservations (obj_reserve_replica) held now, and those
     * cancelled because an applied record claimed their range. */
    uint64_t reservations_in_flight;
    uint64_t reservations_cancelled;
    /* Free bytes of the write zones of the master before this one, held
     * back from placement now (obj_store_zones.c). */
    uint64_t zone_bytes_held;
} obj_stats;

/* -- Life ------------------------------------------------------------------ */

/* Create an empty store. guard is copied (NULL: no guard). Returns SMP_OK or
 * SMP_ENOMEM. */
int obj_store_create(obj_store **out, const obj_guard_ops *guard);
/* Free everything. NULL is a no-op. */
void obj_store_destroy(obj_store *st);
/* Replace the guard (NULL: none). */
void obj_store_set_guard(obj_store *st, const obj_guard_ops *guard);

/* A snapshot loading into st on a thread of its own (master_recovery.c):
 * between loading_begin (called before that thread starts) and loading_end
 * (after it is joined), st belongs to the thread inside obj_store_load and
 * nothing else may touch it. In a debug build (no NDEBUG: the sanitizer
 * build) every entry point below that takes the store checks this
 * (OBJ_CHECK_CALLER, obj_store_internal.h) and aborts, naming itself, when
 * another thread calls it meanwhile: a path that reached the store without
 * waiting for the load. A release build only keeps the flag. Both are
 * called by the thread that owns the store. */
void obj_store_loading_begin(obj_store *st);
void obj_store_loading_end(obj_store *st);

/* Bulk replay (recovery, a standby's bootstrap): between begin and end,
 * objects join the LRU list at its tail instead of at their place by last
 * access -- records arrive in no useful order for the LRU, and placing each
 * one walks the list. A list appended to out of order is sorted once, by
 * the first eviction plan that reads it (obj_plan_eviction), not before the
 * master serves. end returns SMP_OK. */
void obj_store_bulk_begin(obj_store *st);
int obj_store_bulk_end(obj_store *st);

/* SMP_OK when key is a valid object key, else SMP_EINVAL. */
int obj_validate_key(const char *key);

/* -- Puts ------------------------------------------------------------------- */

typedef struct obj_put_params {
    const char *key;
    uint64_t size;
    smp_data_type data_type;
    const char *group;  /* NULL or "": none */
    const char *tenant; /* NULL or "": none */
    int hard_pinned;
    int overwrite;      /* replace a complete object of the same key */
    const char *prefer_node; /* NULL: any; else try this node's segments first */
    uint64_t owner;     /* who started it (the master: its RPC connection), 0: none */
} obj_put_params;

/* Where the client writes the bytes. Strings borrowed (see the top). */
typedef struct obj_put_ticket {
    const char *segment;
    const char *node;
    uint64_t offset;
    uint64_t length;
    /* 1: placed in a write zone whose record is not durable yet: answer
     * the put once obj_prepare_write_zones(segment)'s record is. */
    int zone_wait;
} obj_put_ticket;

/* Start a put: reserve a range in the segment with the most free bytes that
 * can hold it, the preferred node's segments first (soft state, no record),
 * and give the put its incarnation. Returns SMP_OK and fills *out;
 * SMP_EINVAL (bad key, name or type), SMP_EEXIST (complete object and no
 * overwrite), SMP_EBUSY (a put of the key is in flight, or the object to
 * overwrite is leased), SMP_EVETO (guard or host rule: put or upsert into a
 * managed group), SMP_ENOSPC (no segment has room: evict and retry),
 * SMP_ENOMEM. On failure nothing changed (but the refusal counters). */
int obj_put_start(obj_store *st,
                  const obj_put_params *p,
                  uint64_t now,
                  obj_put_ticket *out); /* OUT, may be NULL */

/* Encode the PUT_END record that completes the in-flight put of key with its
 * SHA-256 and access time now. No state change: apply the record once it is
 * durable (applying it consumes the put). A put into (or over a member of) a
 * managed group asks the guard again, as at put start: the group may have
 * been sealed meanwhile. SMP_ENOTFOUND (no put in flight), SMP_EBUSY (the
 * object it overwrites got leased), SMP_EVETO (guard or host rule; the put
 * stays in flight for a revoke), SMP_EINVAL, SMP_ENOMEM. */
int obj_prepare_put_end(obj_store *st,
                        const char *key,
                        const uint8_t checksum[32],
                        uint64_t now,
                        obj_record *out);

/* The group the in-flight put of key names ("" for none; borrowed until the
 * next change), or NULL when no put of key is in flight. */
const char *obj_put_group(const obj_store *st, const char *key);

/* Encode the PUT_REVOKE record of the in-flight put of key. SMP_ENOTFOUND. */
int obj_prepare_put_revoke(obj_store *st, const char *key, obj_record *out);

/* Place puts under OBJ_ZONE_PUT_MAX in write zones (on), or anywhere (off:
 * a cluster with a master that does not replay WRITE_ZONES). Off by
 * default. */
void obj_zones_enable(obj_store *st, int on);

/* Take over the write zones records and snapshots gave st: hold their free
 * bytes back from every placement from now, until obj_cleanup_stale_puts
 * finds a stale put's time passed. A master calls it when it begins to
 * lead; its first placement or sweep does otherwise. Once taken over, the
 * zones of records applied later are this store's own. SMP_OK (nothing to
 * take: the same), SMP_ENOMEM (nothing taken; tried again next time). */
int obj_zones_take_over(obj_store *st, uint64_t now);

/* Encode the WRITE_ZONES record of segment (NULL: of every segment with
 * zones, an arena or held bytes). handing_off: the puts this store placed
 * in zones are handed on in a PUT_HANDOFF, so only the bytes it holds back
 * are named (a stopping master). No state change. SMP_ENOTFOUND (no such
 * segment; none to name), SMP_EBUSY (too many ranges), SMP_ENOMEM. */
int obj_prepare_write_zones(obj_store *st, const char *segment, int handing_off,
                            obj_record *out);

/* Encode the PUT_HANDOFF record of every put in flight (a master that stops
 * with puts still being written hands them on; see the record's comment).
 * No state change: applying it on this store changes nothing. *n gets the
 * number of puts it carries. SMP_ENOTFOUND when none is in flight,
 * SMP_ENOMEM. */
int obj_prepare_put_handoff(obj_store *st, obj_record *out, size_t *n);

/* Encode the PUT_HANDOFF of the in-flight put of key alone: written before
 * the put start of a large put is answered, so that a master that replays
 * it (after a crash of this one) keeps the range from other puts while the
 * writer may still copy into it, and takes the writer's put end. No state
 * change: applying it on this store changes nothing. SMP_ENOTFOUND (no put
 * of key in flight), SMP_EINVAL, SMP_ENOMEM. */
int obj_prepare_put_open(obj_store *st, const char *key, obj_record *out);

/* A node is receiving the bytes of the put of key into segment at offset:
 * the put counts as started now for obj_cleanup_stale_puts (a slow client's
 * put is not taken back while its bytes flow). SMP_OK, or SMP_ENOTFOUND
 * when no such put is in flight (ended, cleaned up, or another range). */
int obj_put_touch(obj_store *st, const char *key, const char *segment, uint64_t offset,
                  uint64_t now);

/* 1 when a put that owner (obj_put_params.owner, not 0) started is in
 * flight, 0 otherwise. A walk of the puts in flight: for occasional
 * questions (a draining master's admission), not for every call. */
int obj_puts_owned(const obj_store *st, uint64_t owner);

/* Free every in-flight put and every replica reservation started at or
 * before now - timeout_ms (soft state: no record). A guard veto
 * (STALE_PUT_CLEANUP) keeps a put; reservations are not asked about (they
 * remove nothing). A put a PUT_HANDOFF gave counts as started at the first
 * call after its apply (apply knows no time). The first call takes over the
 * write zones records and snapshots gave (as the first placement does), and
 * the bytes held back since then go back once timeout_ms passed (not
 * counted). Returns the number of puts and reservations freed. */
int obj_cleanup_stale_puts(obj_store *st, uint64_t now, uint64_t timeout_ms);

/* -- Reads ------------------------------------------------------------------ */

/* Copy up to cap complete replicas of key into out (strings borrowed), set
 * *n_out to the number of complete replicas (may exceed cap), refresh the
 * last access and extend the read lease to now + lease_ms (0: no lease).
 * SMP_ENOTFOUND (no complete object), SMP_EBUSY (held: its removal or
 * replacement is in the OpLog), SMP_EAGAIN (no readable replica: no lease
 * is granted). */
int obj_get_replica_list(obj_store *st,
                         const char *key,
                         uint64_t now,
                         uint64_t lease_ms,
                         obj_replica *out,
                         size_t cap,
                         size_t *n_out);

/* Set the end of key's read leases to ends (0: none), once the master's
 * read-lease table (read_lease.h) says the leases that made it later were
 * given back or their connection closed. Only ever shortens: a lease of
 * the object taken meanwhile keeps the later end. SMP_ENOTFOUND when key is
 * gone (nothing to do). */
int obj_set_lease_end(obj_store *st, const char *key, uint64_t ends);

/* The end of key's read leases at now (0: none active, or no such key). */
uint64_t obj_lease_end(const obj_store *st, const char *key, uint64_t now);

/* Every replica of the complete object key whatever its status, in the
 * object's order: up to cap into out (strings borrowed until the next
 * change), *n_out (may be NULL) the total (may exceed cap). Touches neither
 * the lease nor the access time, and holds do not refuse it: for the master's
 * own bookkeeping, not for readers. SMP_ENOTFOUND, SMP_EINVAL. */
int obj_object_replicas(const obj_store *st,
                        const char *key,
                        obj_replica *out,
                        size_t cap,
                        size_t *n_out);

/* Call fn for every replica (any status, memory and cold) on node (NULL:
 * every node) of every complete object, in key order and, within an object,
 * in its replica order. key and rep are borrowed for the call; fn must not
 * change the store. fn returning non-zero stops the visit (that replica is
 * counted). Returns the number of replicas visited (capped at INT32_MAX),
 * SMP_EINVAL when fn is NULL. Scans every object and replica: meant for
 * rare events (node registration, node down), not for a request path. */
int obj_visit_replicas(const obj_store *st,
                       const char *node,
                       int (*fn)(void *arg, const char *key, const obj_replica *rep),
                       void *arg);

/* obj_visit_replicas from the first object whose key sorts after `after`
 * (NULL: from the first object): a visit stopped by fn goes on from the
 * last key it saw, however the store changed in between (an object removed
 * meanwhile is not met, one added after the cursor is). */
int obj_visit_replicas_after(const obj_store *st,
                             const char *node,
                             const char *after,
                             int (*fn)(void *arg, const char *key, const obj_replica *rep),
                             void *arg);

/* Call fn (NULL: none, count only) for every complete object with no
 * complete replica left (its replicas dropped, failed or still loading:
 * nothing a reader could be given, whatever node is up), in key order; key
 * is borrowed for the call, and fn must not change the store. fn returning
 * non-zero stops the visit. Returns how many such objects were met. Scans
 * every object: for fsck, not for a request path. */
uint64_t obj_visit_unreplicated(const obj_store *st, int (*fn)(void *arg, const char *key), void *arg);

/* 1 when a complete object of key exists, else 0. */
int obj_exists(const obj_store *st, const char *key);

/* A number that grows whenever an object is completed, replaced or removed,
 * or gains, loses or changes a replica (and when the store is cleared); 1 for
 * a new store. While it stays the same, obj_object_info_replicas answers the
 * same for every key. The master also moves it with obj_readable_changed
 * when a node goes up or down (lost: down): what object_get counts as
 * readable depends on that too. Behind the plugins' objects_version. */
uint64_t obj_readable_version(const obj_store *st);
void obj_readable_changed(obj_store *st, int lost);

/* The part of the readable version that can take something away: it grows
 * when an object is removed, when one is replaced by one without a complete
 * replica of the same kind on the same node for each complete replica it had
 * (a replica dropped, failed or moved to another node),
 * when a segment is unmounted or the store cleared, and with
 * obj_readable_changed(st, 1) (a node went down); not when an object is
 * completed or gains a replica. While it stays the same, every complete
 * object still has at least the complete replicas it had. 1 for a new
 * store. Behind the plugins' objects_loss_version. */
uint64_t obj_loss_version(const obj_store *st);

/* Fill info (struct_size set by the caller; fields it does not cover are left
 * alone) for key: the complete object, else an in-flight put (complete 0).
 * SMP_ENOTFOUND. */
int obj_object_info(const obj_store *st, const char *key, smp_object_info *info);

/* obj_object_info, and for a complete object obj_object_replicas, of key
 * from one lookup of the objects: info filled as obj_object_info does, up to
 * cap of the object's replicas (any status) in out and their count in
 * *n_out (0 for an in-flight put, whose info says complete 0). For the
 * plugins' object_get, which asks both of every key it is given.
 * SMP_ENOTFOUND, SMP_EINVAL (NULL key or info, or out NULL with cap). */
int obj_object_info_replicas(const obj_store *st,
                             const char *key,
                             smp_object_info *info,
                             obj_replica *out,
                             size_t cap,
                             size_t *n_out);

/* The tenant of a complete object ("" for none or an unknown key; borrowed
 * until the next mutation). */
const char *obj_object_tenant(const obj_store *st, const char *key);

/* Up to max keys of complete objects starting with prefix ("" or NULL: all),
 * of tenant (NULL: any), strictly after the key `after` (NULL: from the
 * start), in key order. keys[] gets borrowed pointers; *more is 1 when a
 * further page may exist (then keys[*n_out - 1] is the next cursor). Cost
 * O(log n + keys examined in the prefix range). */
int obj_list_prefix(const obj_store *st,
                    const char *prefix,
                    const char *tenant,
                    const char *after,
                    size_t max,
                    const char **keys,
                    size_t *n_out,
                    int *more);

/* -- Removal and eviction (prepare only; apply the records) ---------------- */

/* Encode the REMOVE record of one key. SMP_ENOTFOUND, SMP_EBUSY (leased),
 * SMP_EVETO (guard REMOVE_KEY, or host rule: member of a managed group). */
int obj_prepare_remove(obj_store *st, const char *key, uint64_t now, obj_record *out);

/* The same without asking the guard or applying the host rule: for the
 * plugin's own remove_object (the plugin is the one deciding). A read lease
 * still refuses it (SMP_EBUSY). */
int obj_prepare_remove_unguarded(obj_store *st,
                                 const char *key,
                                 uint64_t now,
                                 obj_record *out);

typedef struct obj_remove_report {
    uint64_t removed;         /* keys put into records */
    uint64_t skipped_leased;  /* leased, or in a managed group with a lease */
    uint64_t skipped_vetoed;  /* refused by the guard or the host rule */
    uint64_t skipped_partial; /* managed group not wholly under the prefix */
} obj_remove_report;

/* Plan the removal of every complete object under prefix ("" = all, reason
 * REMOVE_ALL; otherwise REMOVE_PATTERN). A managed group is removed whole or
 * not at all: only when every member is under the prefix, unleased and
 * allowed; its keys go into one REMOVE record of their own. Other keys are
 * batched OBJ_REMOVE_BATCH per record. Appends to *out; fills *rep (may be
 * NULL). SMP_OK, SMP_EINVAL, SMP_ENOMEM (out left as it was on entry). */
int obj_prepare_remove_prefix(obj_store *st,
                              const char *prefix,
                              uint64_t now,
                              obj_record_list *out,
                              obj_remove_report *rep);

/* When used / capacity > high, plan evictions that bring used down to at most
 * low * capacity: least recently accessed first, only complete, unpinned,
 * unleased objects with a memory replica, asking the guard (BATCH_EVICT; with
 * no guard loaded members of managed groups are skipped). An object with a
 * complete cold replica loses its memory replicas (a PUT_END record); others
 * are removed (REMOVE records), unless obj_store_keep_uncopied said not to:
 * then they are passed over. Appends to *out; *planned_free (may be NULL)
 * gets the bytes the records free. Run one plan at a time: apply its records
 * before planning again. SMP_EINVAL for watermarks outside 0 <= low <= high
 * <= 1, SMP_ENOMEM. */
int obj_plan_eviction(obj_store *st,
                      double high_watermark,
                      double low_watermark,
                      uint64_t now,
                      obj_record_list *out,
                      uint64_t *planned_free);

/* -- Other object changes ----------------------------------------------------- */

/* Encode a PUT_END record setting the hard pin flag of key. SMP_ENOTFOUND. */
int obj_prepare_set_pin(obj_store *st, const char *key, int pinned, obj_record *out);

/* Encode a PUT_END record replacing the replica list of key with reps. A
 * memory replica in reps must be one the object already has (same segment,
 * offset, length): this call can drop memory replicas, change statuses and
 * add, change or drop cold replicas. SMP_ENOTFOUND, SMP_EINVAL. */
int obj_prepare_set_replicas(obj_store *st,
                             const char *key,
                             const obj_replica *reps,
                             size_t n,
                             obj_record *out);

/* -- Adding a memory replica ---------------------------------------------------- */

/* The path from a cold replica back to memory, or to one more memory copy:
 * reserve a range, let the node load the bytes into it, then commit an
 * add-replica record (or release the reservation when the load failed).
 *
 * Reserve a range of the size of the complete object key, tied to its
 * current incarnation: in the segment of prefer_node (NULL: none) with the
 * most free bytes that can hold it, else in another segment the same way
 * (among equally preferred segments, those already holding a memory replica
 * of the object come last). Soft state like an in-flight put: no record, no
 * guard asked (adding a copy removes nothing), freed by
 * obj_cleanup_stale_puts once started at or before now - timeout, and by
 * unmounting its segment. It blocks neither puts nor removal of the key.
 * Fills *out (may be NULL; strings borrowed; length is the object's size;
 * zone_wait set with zones on while no durable write zone covers the
 * range: let the node fill it once obj_prepare_write_zones(segment)'s
 * record, which names it, is durable).
 * SMP_EINVAL, SMP_ENOTFOUND (no complete object), SMP_EBUSY (a reservation
 * for key is in flight), SMP_ERANGE (the object has OBJ_REPLICAS_MAX
 * replicas), SMP_ENOSPC (no segment has room: evict and retry), SMP_ENOMEM.
 * On failure nothing changed. */
int obj_reserve_replica(obj_store *st,
                        const char *key,
                        const char *prefer_node,
                        uint64_t now,
                        obj_put_ticket *out); /* OUT, may be NULL */

/* Encode the add-replica record of key's reservation: a PUT_END carrying the
 * object with update_only set, its replica list plus the new one, and the
 * new COMPLETE memory replica in add_replica. No state change. Applying it
 * adds the memory replica when the object is still that incarnation, does
 * not have the replica yet and the range is the reservation's or free (or
 * held by other soft state, which yields); it keeps every replica the object
 * has at apply and changes nothing else (no access time, no pin). The
 * reservation is consumed by the apply, also when the apply is a no-op
 * because the object was removed or replaced meanwhile; a reservation of
 * another incarnation or range is not touched. Such records hold nothing
 * (obj_hold_record). where (NULL: no check) must name the reservation
 * (segment, offset, length). SMP_EINVAL (bad key, where does not match),
 * SMP_ENOTFOUND (no complete object, no reservation, or the object was
 * replaced since the reservation: release it), SMP_ERANGE (the object got
 * OBJ_REPLICAS_MAX replicas meanwhile), SMP_ENOMEM. */
int obj_prepare_add_replica(obj_store *st,
                            const char *key,
                            const obj_put_ticket *where,
                            obj_record *out);

/* Drop the reservation of key and free its range (the load failed).
 * SMP_EINVAL, SMP_ENOTFOUND. */
int obj_release_reservation(obj_store *st, const char *key);

/* 1 when key's reservation is still the range at offset of segment (not
 * released, cleaned up or cancelled since), else 0. */
int obj_reservation_holds(const obj_store *st, const char *key, const char *segment,
                          uint64_t offset);

/* -- Segments and groups ------------------------------------------------------- */

/* SEGMENT_MOUNT. SMP_EEXIST when id is mounted with another node or
 * capacity, SMP_EINVAL. Capacity is rounded down to OBJ_ALIGN. */
int obj_prepare_segment_mount(obj_store *st,
                              const char *id,
                              const char *node,
                              uint64_t capacity,
                              obj_record *out);
/* The node and capacity of a mounted segment (out pointers may be NULL).
 * SMP_ENOTFOUND when id is not mounted. */
int obj_segment_info(const obj_store *st, const char *id, const char **node, uint64_t *capacity);

/* Told of every range a put or reservation held when it is given up before
 * becoming a replica -- revoked, cancelled, timed out, a failed load: a
 * writer may have left bytes there that no object owns. Called on the
 * caller's thread inside the store call that frees the range, before the
 * range can be handed out again. */
typedef void (*obj_abandon_fn)(void *ctx, const char *node, const char *segment, uint64_t offset,
                               uint64_t length);
void obj_store_set_abandon_hook(obj_store *st, obj_abandon_fn fn, void *ctx);

/* Asked by placement for every segment before it reserves a range there:
 * 1 when an object of tenant ("" none) may be placed on node, else 0 (a
 * node dedicated to another tenant; the master's node registry answers).
 * Every put, added replica (load, repair, migration) is placed through it.
 * Not set: every segment may hold every tenant's objects. */
typedef int (*obj_place_fn)(void *ctx, const char *node, const char *tenant);
void obj_store_set_place_hook(obj_store *st, obj_place_fn fn, void *ctx);

/* keep 1: eviction never removes an object that has no complete cold
 * replica (memory.evict_without_cold_copy: false, the config's default);
 * 0 (a store's own default): it does, least recently used first, as a
 * cache would. */
void obj_store_keep_uncopied(obj_store *st, int keep);


/* The key of an object of a tenant other than tenant with a memory replica,
 * a put or a reservation in segment id (a node now dedicated to tenant that
 * still holds others' bytes), or NULL when there is none. O(objects). */
const char *obj_segment_foreign_key(const obj_store *st, const char *id, const char *tenant);

/* Forget every in-flight put and reservation in segment id (a node restarted
 * on a new segment file: what a writer copied into the old one is gone, so
 * its put end must not commit a range of the new one). A put whose put end
 * is already being committed is left to it. Returns how many were forgotten
 * (0 for an unknown segment). */
int obj_segment_cancel_puts(obj_store *st, const char *id);
/* Call fn(arg, id, node) for every mounted segment in id order until it
 * returns non-zero, which is then returned; 0 when it never did. */
int obj_visit_segments(const obj_store *st,
                       int (*fn)(void *arg, const char *id, const char *node),
                       void *arg);
/* The end of the last occupied range of segment id (0: nothing occupied).
 * SMP_ENOTFOUND. */
int obj_segment_tail_used(const obj_store *st, const char *id, uint64_t *end);
/* The largest unoccupied range over every segment an object of tenant
 * ("" none) may be placed in (the place hook): the biggest put of that
 * tenant that could start now. */
uint64_t obj_memory_largest_free(const obj_store *st, const char *tenant);
/* fsck: the unoccupied ranges of segment id as malloc'd (offset, length)
 * pairs in offset order (*out, freed by the caller; *n_out pairs), and its
 * occupied bytes and capacity (may be NULL). SMP_ENOTFOUND, SMP_ENOMEM. */
int obj_segment_free_ranges(const obj_store *st, const char *id, uint64_t **out, size_t *n_out,
                            uint64_t *used, uint64_t *capacity);
/* fsck repair: occupy [off, off+len) of segment id (soft state, no record;
 * nothing is allocated there, but obj_memory_usage does not count it) while
 * a node zeroes it; obj_segment_release_range gives it back (a release the
 * segment holds no such bytes for is ignored). off and len are multiples of
 * OBJ_ALIGN (SMP_EINVAL). SMP_ESTATE when the range is not wholly
 * unoccupied now, SMP_ENOTFOUND, SMP_ENOMEM. */
int obj_segment_hold_range(obj_store *st, const char *id, uint64_t off, uint64_t len);
void obj_segment_release_range(obj_store *st, const char *id, uint64_t off, uint64_t len);
/* SEGMENT_UNMOUNT. SMP_ENOTFOUND. */
int obj_prepare_segment_unmount(obj_store *st, const char *id, obj_record *out);
/* SEGMENT_UPDATE growing or shrinking a segment. Shrinking cuts only
 * unoccupied bytes: SMP_ERANGE when a range (object, put or reservation)
 * lies past the new capacity (obj_segment_tail_used says where the last one
 * ends) or the capacity is 0; SMP_ENOTFOUND. */
int obj_prepare_segment_update(obj_store *st,
                               const char *id,
                               uint64_t capacity,
                               obj_record *out);
/* SEGMENT_UPDATE setting (managed 1: plugin becomes the group's owner) or
 * clearing a group's managed flag on behalf of plugin (its descriptor name,
 * 1..OBJ_NAME_MAX bytes); the group may be empty. Only the owner changes a
 * managed group: SMP_EVETO when another plugin owns it; SMP_EINVAL on a bad
 * group or plugin name. */
int obj_prepare_group_managed(obj_store *st,
                              const char *group,
                              const char *plugin,
                              int managed,
                              obj_record *out);

/* -- Apply ------------------------------------------------------------------- */

/* Decode and apply one host record. SMP_OK; SMP_ENOTFOUND for a type outside
 * the host's (1..3, 5..7); SMP_EPROTO for an unknown encver or a payload that
 * does not decode or validate; SMP_ESTATE for a SEGMENT_MOUNT of a mounted
 * id on another node; SMP_ENOMEM. On failure the state is unchanged. Records
 * that lost a race apply as described at the top (never an error). */
int obj_apply_record(obj_store *st,
                     uint16_t type,
                     uint16_t encver,
                     const uint8_t *payload,
                     size_t len);

/* Holds cover the window between appending a record that removes or
 * replaces objects (REMOVE, PUT_END) and applying it: while a key is held,
 * obj_get_replica_list answers SMP_EBUSY (no new read lease on bytes about
 * to be freed) and eviction plans skip it -- except that a PUT_END which
 * only updates the replica list of the current incarnation and keeps every
 * memory replica it has exactly as it is (a cold replica recorded or
 * dropped) frees no byte a reader may be given: while only such records
 * hold a key, obj_get_replica_list serves it (the memory replicas stay
 * readable while a cold copy is recorded); eviction plans and writers still
 * wait for every hold. The master holds a record when it
 * appends it and releases the hold after applying it, or when the append
 * failed. Holds count (a key may be held by several records). Other record
 * types, and add-replica records (they remove nothing), hold nothing.
 * obj_hold_record sets *held to what must be passed to obj_release_hold
 * (NULL when nothing was held); the record itself may be gone by then. It
 * takes rec->held when the encoder built one (rec->held is NULL after the
 * call, whatever the outcome), and decodes rec->buf otherwise.
 * SMP_EPROTO, SMP_ENOMEM (nothing held). */
int obj_hold_record(obj_store *st, obj_record *rec, obj_held **held);
void obj_release_hold(obj_store *st, obj_held *held); /* NULL: nothing */

/* Apply the record held holds (not NULL) without decoding it again: the
 * same outcome and errors as obj_apply_record on the record's bytes. The
 * hold itself stays until obj_release_hold. */
int obj_apply_held(obj_store *st, const obj_held *held);

/* -- What an apply lets go of -------------------------------------------------- */

/* A replica leaves the state when a record removes its object (REMOVE) or
 * replaces the object with an incarnation or a replica list without it
 * (PUT_END). Its memory range goes back to the allocator still holding the
 * object's bytes, and its cold file stays on its node's disk: the master
 * zeroes the one and deletes the other. So that it need not look every key
 * of a record up before and after applying it, the store tells it.
 *
 * obj_store_track_released turns tracking on for the next apply: every
 * replica an applied record takes out of the state is noted, in the order
 * it goes. obj_store_take_released then tells ops of each (when applied is
 * nonzero; a failed apply put everything back) and turns tracking off:
 *   - a memory range (its whole extent) only when the allocator has all of
 *     it free after the apply -- a range the new incarnation kept, or that
 *     another record's range now overlaps, is not told;
 *   - a cold file (with its object's key) only when no replica of that
 *     key names it on that node after the apply -- a replica list
 *     rewritten keeps the files it lists.
 * Names passed to ops are valid during the call only. A replica that
 * cannot be noted (out of memory) is not told: its bytes stay until
 * `weightctl fsck --repair`, its file until the node's next registration.
 * Live work only: recovery and a standby's replay never turn it on. */
typedef struct obj_released_ops {
    void (*range)(void *ctx, const char *node, const char *segment, uint64_t offset,
                  uint64_t length);
    void (*file)(void *ctx, const char *key, const char *node, const char *path);
    void *ctx;
} obj_released_ops;
void obj_store_track_released(obj_store *st);
void obj_store_take_released(obj_store *st, int applied, const obj_released_ops *ops);

/* One line describing a host record for a log dump tool, like snprintf:
 * returns the length it needs (buf may be NULL with cap 0), SMP_ENOTFOUND
 * for a non-host type, SMP_EPROTO for a payload that does not decode. */
int obj_describe_record(uint16_t type,
                        uint16_t encver,
                        const uint8_t *payload,
                        size_t len,
                        char *buf,
                        size_t cap);

/* "PUT_END", ... ; "UNKNOWN" outside the host's types. */
const char *obj_record_type_name(uint16_t type);

/* -- Queries for the plugin ABI and metrics ------------------------------------ */

/* Visit up to max members of group in key order strictly after after_key
 * (NULL: from the start). Returns the number visited (the visitor may stop
 * early by returning non-zero), 0 for an unknown group. */
int obj_group_list(const obj_store *st,
                   const char *group,
                   const char *after_key,
                   size_t max,
                   smp_object_visit_fn fn,
                   void *arg);
uint64_t obj_group_count(const obj_store *st, const char *group);
int obj_group_is_managed(const obj_store *st, const char *group);
/* The plugin that owns a managed group, or NULL when it is not managed
 * (borrowed). */
const char *obj_group_owner(const obj_store *st, const char *group);

/* The memory segments' capacity and the bytes of it that objects, puts in
 * flight and replica reservations occupy -- what eviction and the plugins'
 * pressure measure. Ranges fsck holds while a node zeroes them are not in
 * used: they are free again once zeroed, and no eviction could free them
 * sooner (counting them, a sweep of a nearly full segment once evicted the
 * objects beside it). Either pointer may be NULL. */
void obj_memory_usage(const obj_store *st, uint64_t *used, uint64_t *capacity);
/* Complete objects and their bytes of a tenant (0, 0 when unknown). */
void obj_tenant_usage(const obj_store *st,
                      const char *tenant,
                      uint64_t *objects,
                      uint64_t *bytes);
void obj_store_stats(const obj_store *st, obj_stats *out);

/* -- Snapshot ------------------------------------------------------------------ */

/* Stream the durable state (segments, managed groups, complete objects, in
 * id / name / key order) and the puts in flight (key order, as a
 * PUT_HANDOFF's: their writers may still copy after a restart; no other
 * soft state) as one HostSnapshot message through write(), which
 * returns 0 or a negative code (returned as is). The output is
 * deterministic: equal states give equal bytes. */
int obj_store_save(const obj_store *st,
                   int (*write)(void *ctx, const void *buf, size_t len),
                   void *ctx);

/* Load a snapshot into an empty store (SMP_ESTATE if it is not empty); the
 * calling thread is the store's loading thread (obj_store_loading_begin)
 * until it returns.
 * SMP_EPROTO when it does not decode or validate (duplicates, a replica on a
 * segment the snapshot lacks, overlapping ranges, an open put whose range
 * or key is taken); on any failure the store is left empty. Open puts are
 * held as a PUT_HANDOFF's, their time from the first sweep. */
int obj_store_load(obj_store *st, const uint8_t *data, size_t len);

/* obj_store_load of a section whose bytes are still arriving in data:
 * wait(arg, upto) blocks until its first upto bytes are in (or no more will
 * come) and returns how many are. The records are applied as their bytes
 * come; the indexes are sized from the first MiB. A section that does not
 * load so -- records not in a save's order (segments, groups, objects, open
 * puts), or
 * refused -- is loaded again whole once all of it is in, which gives the
 * answer (as obj_store_load's); bytes that stop before the end are
 * SMP_EPROTO. The bytes are not checked against any checksum here: the
 * caller drops the store when the section turns out damaged. wait NULL:
 * obj_store_load. */
int obj_store_load_fed(obj_store *st,
                       const uint8_t *data,
                       size_t len,
                       size_t (*wait)(void *arg, size_t upto),
                       void *arg);

#endif /* HOST_OBJ_STORE_H */
