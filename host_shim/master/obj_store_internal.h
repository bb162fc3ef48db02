/* obj_store_internal.h -- what the obj_store*.c files share: the skip
 * list and state types and the calls across the files (obj_ prefix, like the
 * public ones). Not for use outside host_shim/master/obj_store*.c. */
#ifndef OBJ_STORE_INTERNAL_H
#define OBJ_STORE_INTERNAL_H

#include "obj_store.h"

#include "host_bulk.h"
#include "host_uthash.h"
#include "host_records.pb-c.h"
#include "pb_arena.h"

#define OBJ_SL_MAX_LEVEL 24
/* The head of a list without a hash starts with this many levels and grows
 * (a node reaches level 5 once in 256). */
#define OBJ_SL_ORDERED_LEVELS 4

struct obj_slab;

typedef struct obj_sl_node {
    const char *key; /* borrowed from val's owner */
    void *val;
    struct obj_slab *slab; /* the load's slab it was taken from (one
                            * reference); NULL: malloc'ed */
    int level;
    /* next[0..level) forward, then level back links (OBJ_SL_PREV): a node
     * found through the hash is unlinked without searching the levels. */
    struct obj_sl_node *next[];
} obj_sl_node;

#define OBJ_SL_PREV(n, i) ((n)->next[(n)->level + (i)])

/* The exact-key index of a hashed list (obj_store_hash.c): open addressing,
 * linear probes, each slot the key's 64-bit hash beside its node; a node
 * NULL is a free slot. While a grown table fills, the one before it drains
 * into it (old, see obj_store_hash.c). */
typedef struct obj_ix_slot {
    uint64_t hash;
    obj_sl_node *node;
} obj_ix_slot;

typedef struct obj_ix {
    obj_ix_slot *slots; /* cap slots (a power of two; 0: none yet) */
    size_t cap;
    size_t count;       /* entries in slots */
    obj_ix_slot *old;   /* the table before the last growth, draining; NULL: none */
    size_t old_cap;
    size_t old_count;   /* entries still in old */
    size_t old_next;    /* the next old slot to move */
    /* The key hash: obj_ix_hash_default (XXH3); a test may set another
     * while the index is empty (to force collisions). */
    uint64_t (*hash)(const char *key, size_t len);
} obj_ix;

typedef struct obj_sl {
    obj_sl_node *head;  /* next[] only: nothing links back to the head */
    obj_ix ix;          /* the same nodes, by key (empty when !hashed) */
    int level;
    int hashed;         /* exact lookups by hash; 0: through the levels */
    /* tail[i] is the last node at level i, NULL when the level is empty
     * (in the head's allocation, after its links). A key above every key --
     * each record of a snapshot, saved in order -- is appended without a
     * search. */
    obj_sl_node **tail;
    size_t count;
    uint64_t rng;
} obj_sl;


/* ------------------------------------------------------------------------ */
/* State                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct obj_extent {
    uint64_t off;
    uint64_t len;
} obj_extent;

typedef struct obj_segment {
    char *id;
    char *node;
    uint64_t capacity;
    uint64_t used;      /* allocated bytes, held ones included */
    uint64_t held;      /* of used: ranges fsck holds while the node zeroes them */
    size_t nalloc;      /* allocated ranges */
    obj_extent *free;   /* sorted by offset, never adjacent */
    size_t nfree;
    size_t capfree;     /* always >= nalloc + 2 */
    /* Write zones (obj_store_zones.c). zones: the durable ones, as the last
     * WRITE_ZONES record (or snapshot) gave them. arena: where this master
     * places its puts under OBJ_ZONE_PUT_MAX (len 0: none yet). quar: the
     * free bytes of the zones of the master before, held back from puts
     * (allocated, counted in used) since the store's quar_since; was: those
     * zones, which this store's records name while they are held. */
    obj_extent *zones;
    size_t nzones;
    obj_extent arena;
    obj_extent *quar;
    size_t nquar;
    uint64_t quar_bytes; /* their bytes */
    obj_extent *was;
    size_t nwas;
} obj_segment;

/* A node id as the replicas hold it: one copy per store and node, shared
 * by every replica on that node and counted (obj_node_intern), so a read
 * compares or hands on a pointer to a string that stays in cache rather
 * than one allocation per replica. */
typedef struct obj_node_name {
    struct obj_node_name **table; /* the store's table it is in */
    struct obj_node_name **hint;  /* the store's node_hint (cleared with it) */
    size_t refs;
    UT_hash_handle hh;
    char id[];
} obj_node_name;

typedef struct obj_rep {
    smp_replica_kind kind;
    obj_replica_status status;
    char *node;         /* interned: obj_node_name.id (obj_node_intern) */
    obj_segment *seg;   /* MEMORY */
    uint64_t offset;    /* MEMORY */
    uint64_t length;
    char *path;         /* COLD */
} obj_rep;

/* What a tracked apply took out of the state (obj_store_released.c): the
 * memory ranges as they were freed, the cold files with copies of their
 * names (the object is gone by the time they are told). The arrays are
 * kept from one apply to the next. */
typedef struct obj_released_range {
    obj_segment *seg; /* segments outlive the apply of REMOVE and PUT_END */
    uint64_t offset, length;
} obj_released_range;

typedef struct obj_released_file {
    char *key, *node, *path;
} obj_released_file;

typedef struct obj_released {
    int on;
    obj_released_range *ranges;
    size_t nranges, capranges;
    obj_released_file *files;
    size_t nfiles, capfiles;
} obj_released;

/* The objects a snapshot load builds, and their nodes in the objects' and
 * their group's lists, come from mappings (host_bulk.h) of the section's
 * size each, a new one when the last is full: no malloc per object, replica
 * list and node, and pages a feed's thread readies ahead of the load. An
 * object or node of a slab is freed on its own like any other; a mapping
 * goes when its last object and node and the load's reference (while it is
 * the load's current slab) are gone. */
#define OBJ_LOAD_CHUNK_MIN ((size_t)64 << 10)
typedef struct obj_slab {
    size_t len;   /* bytes mapped, this header included */
    size_t used;  /* bytes handed out, this header included */
    size_t refs;  /* objects and nodes not freed, plus one while the load
                   * runs */
    size_t ready; /* bytes whose pages are ready: host_bulk_ready's, or as
                   * far as the feed said to go before asking again */
    host_bulk_feed *feed; /* readies the pages while the load fills the
                           * slab; NULL: host_bulk_ready does, or filled */
} obj_slab;

typedef struct obj_object {
    char *key;             /* key and tenant are in strings[] below: one */
    char *tenant;          /* allocation per object, and the key a lookup
                            * compares sits next to the fields */
    /* The group's own name (obj_group.name) once the object is indexed:
     * a group lives while it has members, and every indexed object with a
     * group is one of them (issue 20: a copy per object was some 40 bytes
     * of each of a million). Before that, the record's name it was built
     * from; "" (static) for no group. An object taken out of its group (a
     * replaced one, a dropped one) must not read it again. */
    const char *group;
    uint64_t size;
    uint64_t last_access;
    uint64_t put_id;       /* incarnation */
    uint64_t lease_expiry; /* soft */
    obj_rep *reps;
    struct obj_object *lru_prev;
    struct obj_object *lru_next;
    obj_slab *slab;        /* the load's mapping it lives in; NULL: calloc'ed */
    uint8_t checksum[32];
    /* The narrow fields last, so that the object is 128 bytes, two cache
     * lines (a million of them at 100,000 revisions: issue 20). */
    uint32_t nreps;        /* at most OBJ_REPLICAS_MAX */
    uint8_t data_type;     /* an smp_data_type, checked when decoded */
    uint8_t pinned;
    uint8_t in_lru;        /* on the LRU list: has a complete memory replica */
    uint8_t reps_own;      /* reps is its own allocation; 0: after strings[] */
    char strings[];
} obj_object;
_Static_assert(OBJ_REPLICAS_MAX <= UINT32_MAX, "obj_object.nreps is 32 bits");
_Static_assert(SMP_DATA_WEIGHT <= UINT8_MAX, "obj_object.data_type is 8 bits");
_Static_assert(sizeof(void *) != 8 || sizeof(obj_object) == 128,
               "obj_object grew past two cache lines");

typedef struct obj_put {
    char *key;
    char *group;
    char *tenant;
    uint64_t size;
    smp_data_type data_type;
    int pinned;
    obj_segment *seg;
    uint64_t offset;
    uint64_t alloc;
    uint64_t started;
    uint64_t put_id;
    uint64_t owner;     /* obj_put_params.owner */
    int consuming;      /* its PUT_END is being applied: range already freed */
    int untimed;        /* from a PUT_HANDOFF: started is set by the next sweep */
    int handed;         /* from a PUT_HANDOFF: a later one may supersede it */
    int zoned;          /* placed in a write zone, no record of its start */
} obj_put;

/* A range reserved for one more memory replica of a complete object
 * (obj_reserve_replica): soft state tied to the incarnation put_id. */
typedef struct obj_reservation {
    char *key;
    obj_segment *seg;
    uint64_t offset;
    uint64_t length;    /* the object's size */
    uint64_t alloc;
    uint64_t started;
    uint64_t put_id;
} obj_reservation;

typedef struct obj_group {
    char *name;     /* name_buf */
    char *owner;    /* plugin owning the managed group; NULL: not managed */
    obj_sl members; /* key -> obj_object */
    char name_buf[];
} obj_group;

typedef struct obj_tenant {
    char *name;
    uint64_t objects;
    uint64_t bytes;
} obj_tenant;

/* A soft hold on a key whose removal or replacement is in the OpLog. Holds
 * are only ever looked up by key, so they live in a plain hash, one
 * allocation each. */
typedef struct obj_hold {
    UT_hash_handle hh;
    uint64_t count;
    uint64_t readable;    /* of count: records that keep every memory replica */
    char key[];
} obj_hold;

struct obj_store {
    obj_sl objects;
    obj_sl groups;
    obj_sl tenants;
    obj_sl segments;
    obj_sl puts;
    obj_sl reserves;      /* key -> obj_reservation */
    obj_hold *holds;      /* by key */
    obj_node_name *node_names; /* the replicas' node ids, interned */
    obj_node_name *node_hint;  /* the one obj_node_intern gave last (the
                                * replicas of a run of records are on the
                                * same nodes); NULL once it is freed */
    obj_segment *seg_hint;     /* the one obj_segment_get found last; NULL
                                * once it is unmounted */
    uint64_t next_put_id; /* > every incarnation seen */
    obj_object *lru_head; /* oldest access */
    obj_object *lru_tail;
    int bulk_load;        /* LRU inserts append (obj_lru_insert) */
    int lru_unsorted;     /* a bulk append broke the LRU list's (last access,
                           * key) order: obj_lru_resort sorts it when an
                           * eviction plan needs it; 0: nothing to sort */
    obj_sl_node *group_hint; /* the groups' node obj_group_get_or_create
                              * found last: records of a group come one
                              * after another, and a snapshot's groups in
                              * the order of their objects. NULL when none;
                              * cleared when its group is freed */
    obj_slab *load_slab;  /* while a snapshot loads: where its objects go */
    size_t load_chunk;    /* and the bytes of the next slab when it is full */
    obj_guard_ops guard;
    obj_stats stats;      /* counters; memory fields computed on demand */
    obj_abandon_fn abandon; /* ranges given up with a writer's bytes in them */
    void *abandon_ctx;
    int evict_keep_uncopied; /* eviction leaves objects without a cold copy alone */
    obj_place_fn place_ok;  /* may a segment's node hold a tenant's objects */
    void *place_ctx;
    obj_released released;  /* what the tracked apply let go of */
    int loading;            /* obj_store_loading_begin .. _end */
    uint64_t readable_version; /* obj_readable_version: grows with every change */
    uint64_t loss_version;     /* obj_loss_version: grows with every possible loss */
    /* Write zones (obj_store_zones.c): zones_on places small puts in them
     * (obj_zones_enable); zones_live once this store took over the zones
     * it was given (zones_inherited: some it has not yet), whose free bytes
     * it holds back since quar_since, for a stale put's time (0: none). */
    int zones_on;
    int zones_live;
    int zones_inherited;
    uint64_t quar_since;
};

/* The store obj_store_load is loading on this thread, NULL when none. */
extern _Thread_local const obj_store *obj_loading_here;

/* First statement of every entry point of obj_store.h that takes the store
 * (all but create and load): in a debug build, abort naming fn when st is
 * loading a snapshot on another thread (obj_store_loading_begin). */
void obj_check_caller(const obj_store *st, const char *fn);
#ifdef NDEBUG
#define OBJ_CHECK_CALLER(st) ((void)0)
#else
#define OBJ_CHECK_CALLER(st) obj_check_caller((st), __func__)
#endif

/* Keys collected for REMOVE records of at most OBJ_REMOVE_BATCH keys. */
typedef struct obj_keybatch {
    const char *keys[OBJ_REMOVE_BATCH];
    uint64_t put_ids[OBJ_REMOVE_BATCH];
    size_t n;
} obj_keybatch;

/* obj_store_zones.c */
/* Place a put of len bytes (a multiple of OBJ_ALIGN) in s's write zone,
 * opening a new zone where none has room: SMP_OK with *wait 1 when the
 * zone's WRITE_ZONES record is not durable yet (obj_prepare_write_zones),
 * SMP_ENOSPC, SMP_ENOMEM. */
int obj_zone_alloc(obj_segment *s, uint64_t len, uint64_t *off, int *wait);
/* Give back what obj_zones_take_over held once timeout_ms passed since,
 * telling the abandon hook (a writer's bytes may be there). */
void obj_zones_release(obj_store *st, uint64_t now, uint64_t timeout_ms);
/* Apply one segment's WriteZones (a record's or a snapshot's): SMP_EPROTO
 * when a range is malformed; an unknown segment is skipped. */
int obj_apply_write_zones(obj_store *st, const Hostrec__WriteZones *z);
/* 1 when [r.off, r.off+r.len) lies in one of s's durable zones. */
int obj_zones_cover(const obj_segment *s, obj_extent r);
/* The bytes obj_zones_take_over holds back now. */
uint64_t obj_zones_held_bytes(const obj_store *st);
/* Apply a WRITE_ZONES record (obj_apply_write_zones of each entry). */
int obj_apply_write_zone_record(obj_store *st, const Hostrec__WriteZoneRecord *m);
/* Free a segment's zone arrays (obj_segment_free). */
void obj_segment_zones_free(obj_segment *s);
/* The snapshot field of s's zones; 0 when it has none. Its arrays are
 * malloc'd (obj_write_zones_fini). */
int obj_write_zones_of(const obj_segment *s, Hostrec__WriteZones *z);
void obj_write_zones_fini(Hostrec__WriteZones *z);

/* obj_store_released.c */
/* Note every replica of o, which is leaving the state, when tracking is on. */
void obj_released_note(obj_store *st, const obj_object *o);
/* Free what tracking keeps (obj_store_destroy). */
void obj_released_fini(obj_released *r);

/* obj_store.c (objects, groups, tenants, life, reads) */
void obj_rep_clear(obj_rep *r);
void obj_object_free(obj_object *o);
void obj_put_free(obj_put *p);
void obj_put_forget(obj_store *st, obj_put *p);
void obj_reservation_forget(obj_store *st, obj_reservation *r, int free_range);
/* Forget a reservation given up before it became a replica (its range may
 * hold part of a load): the abandon hook hears of the range first. */
void obj_reservation_abandon(obj_store *st, obj_reservation *r);
obj_group *obj_group_find(const obj_store *st, const char *name);
obj_group *obj_group_get_or_create(obj_store *st, const char *name, int *created);
void obj_group_gc(obj_store *st, obj_group *g);
int obj_group_managed_flag(const obj_store *st, const char *name);
int obj_has_memory(const obj_object *o);
void obj_lru_unlink(obj_store *st, obj_object *o);
void obj_lru_insert(obj_store *st, obj_object *o);
int obj_lru_resort(obj_store *st);
void obj_stats_account(obj_store *st, const obj_object *o, int sign);
void obj_stats_leave_keeping(obj_store *st, const obj_object *o);
int obj_reps_cover(const obj_object *n, const obj_object *old);
int obj_cancel_puts_in(obj_store *st, const obj_segment *seg, uint64_t off, uint64_t len);
/* An incarnation a record or snapshot names is used: the next put's is later. */
static inline void obj_note_put_id(obj_store *st, uint64_t put_id)
{
    if (put_id >= st->next_put_id) st->next_put_id = put_id == UINT64_MAX ? UINT64_MAX : put_id + 1;
}
void obj_handed_drop(obj_store *st, obj_put *p);
/* The HandedPut of p (PUT_HANDOFF, snapshots); its strings borrowed from p. */
void obj_handed_of(const obj_put *p, Hostrec__HandedPut *h);
/* 1 when a handed put is well formed (its segment may be unknown here). */
int obj_handed_ok(const Hostrec__HandedPut *h);
/* Take one handed put as in flight here, its time running from the next
 * sweep: 1 taken, 0 not (an object of that incarnation or newer has its
 * key -- a put that ended since --, or a put its key has in flight is not
 * an older handed one, or its range is not free but for older handed
 * puts), or SMP_ENOMEM. Older handed puts in its way are dropped
 * (obj_handed_drop). */
int obj_take_handed(obj_store *st, const Hostrec__HandedPut *h);
int obj_object_reserve(obj_store *st, obj_object *o);
/* Return o's memory ranges to their segments (noting them and its cold
 * files while tracking is on: obj_released_note). */
void obj_object_release(obj_store *st, obj_object *o);
void obj_object_drop(obj_store *st, obj_sl_node *at);
int obj_object_index(obj_store *st, obj_object *n, obj_object *old);
void obj_store_clear(obj_store *st);
/* obj_store_index.c (skip list, names, segment allocator) */
int obj_sl_init(obj_sl *sl);
/* An obj_sl without the hash index: exact lookups walk the levels
 * (O(log n) compares). For the many small lists (a group's members), where
 * a hash table per list would cost more memory than its members. */
int obj_sl_init_ordered(obj_sl *sl);
void obj_sl_fini(obj_sl *sl);
obj_sl_node *obj_sl_find(const obj_sl *sl, const char *key);
void *obj_sl_get(const obj_sl *sl, const char *key);
int obj_sl_put(obj_sl *sl, const char *key, void *val);
/* obj_sl_put, a new node taken from slab (a load's, NULL: none) while it
 * has room, else malloc'ed. */
int obj_sl_put_from(obj_sl *sl, const char *key, void *val, struct obj_slab *slab);
void *obj_sl_unlink(obj_sl *sl, obj_sl_node *n);
/* Free a node that is in no list: back to its slab or to malloc. */
void obj_sl_node_free(obj_sl_node *n);
void *obj_sl_del(obj_sl *sl, const char *key);
obj_sl_node *obj_sl_after(const obj_sl *sl, const char *key, int inclusive);
int obj_name_ok(const char *s, size_t max, int allow_empty);
/* The store's copy of node id `id` with one reference more (made on first
 * use), for an obj_rep's node; NULL when out of memory. */
char *obj_node_intern(obj_store *st, const char *id);
/* Drop a reference taken by obj_node_intern (NULL: no-op); the last one
 * frees the copy. Never allocates. */
void obj_node_release(char *id);
const char *obj_str(const char *s);
uint64_t obj_ext_len(uint64_t length);
int obj_has_prefix(const char *s, const char *prefix, size_t plen);
int obj_seg_alloc(obj_segment *s, uint64_t len, uint64_t *off);
int obj_seg_reserve(obj_segment *s, uint64_t off, uint64_t len);
void obj_seg_free(obj_segment *s, uint64_t off, uint64_t len);
/* 1 when [off, off+len) is wholly free in s, else 0. */
int obj_seg_is_free(const obj_segment *s, uint64_t off, uint64_t len);
void obj_seg_grow_capacity(obj_segment *s, uint64_t cap);
void obj_seg_set_capacity(obj_segment *s, uint64_t cap);
uint64_t obj_seg_tail_used(const obj_segment *s);
int obj_seg_ensure(obj_segment *s, size_t extra);
void obj_segment_free(obj_segment *s);
obj_segment *obj_segment_get(obj_store *st, const char *id);
obj_segment *obj_segment_new(const char *id, const char *node, uint64_t cap);
/* obj_store_hash.c (the exact-key index of a hashed list) */
uint64_t obj_ix_hash_default(const char *key, size_t len);
void obj_ix_init(obj_ix *ix);
/* Free the tables (not the nodes). */
void obj_ix_fini(obj_ix *ix);
/* The hash of key as ix computes it. */
uint64_t obj_ix_key_hash(const obj_ix *ix, const char *key);
/* The node of key (h its obj_ix_key_hash), or NULL. */
obj_sl_node *obj_ix_find_h(const obj_ix *ix, const char *key, uint64_t h);
obj_sl_node *obj_ix_find(const obj_ix *ix, const char *key);
/* Make room for one more entry (grows the table, which starts a drain of
 * the old one). SMP_ENOMEM leaves the index as it was. */
int obj_ix_reserve(obj_ix *ix);
/* Size an empty index for n entries at once (a snapshot load). SMP_ENOMEM
 * or SMP_ESTATE (not empty) leave it as it was. */
int obj_ix_presize(obj_ix *ix, size_t n);
/* Ask the CPU to fetch the slot where key's probe starts (a hint: nothing
 * changes), so that an insert of key a little later does not wait for it. */
void obj_ix_prefetch(const obj_ix *ix, const char *key);
/* Index n, whose key (hash h) is not in ix, after obj_ix_reserve succeeded
 * (never fails). Moves a few slots of a draining table. */
void obj_ix_insert_h(obj_ix *ix, obj_sl_node *n, uint64_t h);
/* Unindex n (found by its key's hash and its address; absent: no-op).
 * Never allocates. */
void obj_ix_remove(obj_ix *ix, obj_sl_node *n);
/* obj_store_records.c (records) */
void obj_record_list_truncate(obj_record_list *l, size_t n);
int obj_encode(const ProtobufCMessage *msg, uint16_t type, obj_record *out);
int obj_list_push(obj_record_list *l, obj_record *r);
void obj_rep_view(const obj_rep *r, obj_replica *v);
int obj_encode_object_add(const obj_object *o,
                          const obj_replica *views,
                          size_t n,
                          int update_only,
                          const obj_replica *added,
                          obj_record *out);
int obj_encode_object(const obj_object *o,
                      const obj_replica *views,
                      size_t n,
                      int update_only,
                      obj_record *out);
int obj_encode_remove(const char *const *keys,
                      const uint64_t *put_ids,
                      size_t n,
                      obj_record *out);
int obj_keybatch_flush(obj_keybatch *b, obj_record_list *out);
int obj_keybatch_add(obj_keybatch *b, const obj_object *o, obj_record_list *out);
int obj_apply_object(obj_store *st, const Hostrec__ObjectRecord *m);
/* The bytes an object built from m takes in a load's slab (aligned). */
size_t obj_object_bytes(const Hostrec__ObjectRecord *m);
/* A slab of bytes for a load's objects, holding the load's reference; NULL
 * when it cannot be mapped (objects then come from calloc). fed: its pages
 * are readied by a feed's thread ahead of the takes (host_bulk_feed_start),
 * as a load's are; 0: by host_bulk_ready, which is also what a fed slab
 * falls back to when the thread cannot start (the tests ask for it). */
obj_slab *obj_slab_new(size_t bytes, int fed);
/* Drop one reference; the last unmaps the slab. NULL is a no-op. */
void obj_slab_unref(obj_slab *sl);
/* The bytes sl has left to hand out. */
static inline size_t obj_slab_room(const obj_slab *sl)
{
    return sl->len - sl->used;
}
/* The load is done with sl: stop its feed and drop the load's reference.
 * NULL is a no-op. */
void obj_slab_filled(obj_slab *sl);
/* Hand out need bytes of sl (the caller checked there is room; zeroed),
 * one reference more, its pages ready first (from the feed, or mapped a
 * window ahead by host_bulk_ready). */
void *obj_slab_take(obj_slab *sl, size_t need);
int obj_segment_msg_ok(const Hostrec__SegmentRecord *m);
int obj_apply_segment_mount(obj_store *st, const Hostrec__SegmentRecord *m);
int obj_set_group_managed(obj_store *st, const char *name, const char *owner);
const char *obj_group_msg_owner(const Hostrec__GroupRecord *m);
obj_hold *obj_hold_find(const obj_store *st, const char *key);
/* obj_store_put.c (puts) */
int obj_lease_active(const obj_object *o, uint64_t now);
/* obj_store_remove.c (guard, removal) */
int obj_guard_decide(obj_store *st,
                     smp_guard_reason reason,
                     const char *key,
                     const char *group,
                     smp_data_type data_type,
                     smp_replica_kind kind,
                     int host_forbids);

#endif /* OBJ_STORE_INTERNAL_H */
