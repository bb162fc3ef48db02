/* fuzz_host_records.c -- fuzz target: the host's OpLog records as recovery
 * and a standby apply them to the object store (obj_apply_record).
 *
 * The input is a sequence of records, each framed as
 *   [type: 1 byte][len: u16 little-endian][payload: len bytes]
 * (a len past the end of the input takes what is left): the type is the
 * byte modulo 8, at encoding version 2 when its bit 3 is set (type 2's
 * PUT_HANDOFF, type 7's WRITE_ZONES), else OBJ_REC_ENCVER. Every record goes to
 * one fresh obj_store per input in the master's order -- hold, apply,
 * release -- and is described (obj_describe_record) as a log dump tool would.
 * A refused record is fine; a crash, a leak or a sanitizer report is not.
 *
 * After the sequence the state is walked through its read paths (listing,
 * object info and replicas, groups, segments, tenants, stats) and checked:
 *   - the state the records built must snapshot and load into a fresh store
 *     (obj_store_save, obj_store_load), and the loaded store must save to the
 *     same bytes: recovery would otherwise accept records it cannot
 *     snapshot, or lose state across a restart;
 *   - records the store prepares from that state (an eviction plan, removal
 *     of everything) must apply.
 * A violation aborts, so the driver or libFuzzer reports it.
 *
 * Seeds: record sequences made by the prepare functions (segment mount and
 * update, put start and end, add replica, replica list, pin, put revoke,
 * put handoff, managed group, remove, remove prefix, segment unmount),
 * framed as above. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "obj_store.h"

#define LIST_PAGE 16  /* keys per obj_list_prefix page */
#define REPS_CAP 8    /* replicas fetched per object */
#define NOW 1000000   /* 'now' for the plans; records need none */

static void die(const char *what)
{
    fprintf(stderr, "fuzz_host_records: %s\n", what);
    abort();
}

/* Describe one record: the length asked for with no buffer must be the
 * length written into a buffer of that size, and a short buffer must be
 * safe. */
static void describe(uint16_t type, uint16_t encver, const uint8_t *payload, size_t len)
{
    char small[8];
    int need = obj_describe_record(type, encver, payload, len, NULL, 0);
    if (need < 0) return;
    char *line = malloc((size_t)need + 1);
    if (line == NULL) die("out of memory");
    if (obj_describe_record(type, encver, payload, len, line, (size_t)need + 1) != need ||
        strlen(line) != (size_t)need)
        die("obj_describe_record answers two lengths for one record");
    (void)obj_describe_record(type, encver, payload, len, small, sizeof(small));
    free(line);
}

/* Apply one record the way the master does: hold it (as at append), apply
 * it, release the hold. The payload is copied into a buffer of exactly len
 * bytes so that a read past it is caught; len 0 is passed as NULL. */
static void apply_one(obj_store *st, uint16_t type, uint16_t encver, const uint8_t *data,
                      size_t len)
{
    uint8_t *payload = NULL;
    obj_held *held = NULL;
    if (len > 0) {
        if ((payload = malloc(len)) == NULL) die("out of memory");
        memcpy(payload, data, len);
    }
    describe(type, encver, payload, len);
    obj_record rec = {type, encver, payload, len, NULL};
    if (obj_hold_record(st, &rec, &held) < 0) held = NULL;
    (void)obj_apply_record(st, type, encver, payload, len);
    obj_release_hold(st, held);
    free(payload);
}

static int count_visit(void *arg, const smp_object_info *obj)
{
    size_t *n = arg;
    if (obj->key == NULL || obj->key[0] == '\0') die("obj_group_list visited a nameless object");
    (*n)++;
    return 0;
}

static int count_replica(void *arg, const char *key, const obj_replica *rep)
{
    size_t *n = arg;
    (void)key;
    (void)rep;
    (*n)++;
    return 0;
}

/* Read everything about one listed object: info, replicas, its segments,
 * its group. */
static void walk_object(const obj_store *st, const char *key)
{
    smp_object_info info;
    obj_replica reps[REPS_CAP];
    size_t nreps = 0, visited = 0;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    if (!obj_exists(st, key) || obj_object_info(st, key, &info) != SMP_OK || !info.complete)
        die("a listed key is not a complete object");
    if (obj_object_replicas(st, key, reps, REPS_CAP, &nreps) != SMP_OK)
        die("a listed key has no replica list");
    for (size_t i = 0; i < nreps && i < REPS_CAP; i++)
        if (reps[i].kind == SMP_REPLICA_MEMORY &&
            obj_segment_info(st, reps[i].segment, NULL, NULL) != SMP_OK)
            die("a memory replica names a segment that is not mounted");
    if (info.group != NULL && info.group[0] != '\0') {
        (void)obj_group_list(st, info.group, NULL, LIST_PAGE, count_visit, &visited);
        (void)obj_group_list(st, info.group, key, 1, count_visit, &visited);
        (void)obj_group_count(st, info.group);
        (void)obj_group_is_managed(st, info.group);
    }
    if (nreps > 0) (void)obj_visit_replicas(st, reps[0].node, count_replica, &visited);
}

/* List every complete object page by page and walk it; the count must match
 * the store's statistics. */
static void walk_state(const obj_store *st)
{
    const char *keys[LIST_PAGE];
    char after[OBJ_KEY_MAX + 1] = "";
    size_t listed = 0, n = 0, visited = 0;
    int more = 1, first = 1;
    uint64_t used = 0, cap = 0, objs = 0, bytes = 0;
    obj_stats stats;
    while (more) {
        if (obj_list_prefix(st, "", NULL, first ? NULL : after, LIST_PAGE, keys, &n, &more) !=
            SMP_OK)
            die("obj_list_prefix refused a full listing");
        for (size_t i = 0; i < n; i++) walk_object(st, keys[i]);
        listed += n;
        if (n == 0) break;
        snprintf(after, sizeof(after), "%s", keys[n - 1]);
        first = 0;
    }
    (void)obj_list_prefix(st, "w/", "tenant-a", NULL, LIST_PAGE, keys, &n, &more);
    (void)obj_visit_replicas(st, NULL, count_replica, &visited);
    obj_tenant_usage(st, "tenant-a", &objs, &bytes);
    obj_tenant_usage(st, "", &objs, &bytes);
    obj_memory_usage(st, &used, &cap);
    obj_store_stats(st, &stats);
    if (used > cap) die("more segment memory used than mounted");
    if (stats.objects_by_type[0] + stats.objects_by_type[1] + stats.objects_by_type[2] != listed)
        die("the listing and the statistics count different objects");
}

/* The state must survive a snapshot: save, load into a fresh store, save
 * again to the same bytes. */
static void check_round_trip(const obj_store *st)
{
    obj_store *again = NULL;
    fuzz_buf a = {0}, b = {0};
    int rc;
    if (obj_store_save(st, fuzz_buf_write, &a) != SMP_OK) die("obj_store_save failed");
    if (obj_store_create(&again, NULL) != SMP_OK) die("out of memory");
    if ((rc = obj_store_load(again, a.p, a.n)) != SMP_OK) {
        fprintf(stderr, "fuzz_host_records: obj_store_load: %s\n", smp_strerror(rc));
        die("the state the records built does not load once saved");
    }
    if (obj_store_save(again, fuzz_buf_write, &b) != SMP_OK) die("obj_store_save failed");
    if (a.n != b.n || memcmp(a.p, b.p, a.n) != 0)
        die("a loaded snapshot saves to other bytes than it was loaded from");
    obj_store_destroy(again);
    free(a.p);
    free(b.p);
}

/* Records the store prepares must apply to the state they were prepared
 * from. */
static void apply_prepared(obj_store *st, obj_record_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        obj_record *r = &l->recs[i];
        if (obj_apply_record(st, r->type, r->encver, r->buf, r->len) != SMP_OK)
            die("a record the store prepared does not apply");
    }
    obj_record_list_free(l);
}

static void run_plans(obj_store *st)
{
    obj_record_list l = {0};
    if (obj_plan_eviction(st, 0.0, 0.0, NOW, &l, NULL) == SMP_OK) apply_prepared(st, &l);
    obj_record_list_free(&l);
    if (obj_prepare_remove_prefix(st, "", NOW, &l, NULL) == SMP_OK) apply_prepared(st, &l);
    obj_record_list_free(&l);
    walk_state(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    obj_store *st = NULL;
    size_t off = 0;
    if (obj_store_create(&st, NULL) != SMP_OK) die("out of memory");
    while (size - off >= 3) {
        uint16_t type = data[off] % 8;
        uint16_t encver = data[off] & 8 ? OBJ_REC_HANDOFF_ENCVER : OBJ_REC_ENCVER;
        size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
        off += 3;
        if (len > size - off) len = size - off;
        apply_one(st, type, encver, data + off, len);
        off += len;
    }
    walk_state(st);
    check_round_trip(st);
    run_plans(st);
    obj_store_destroy(st);
    return 0;
}

/* -- seeds ------------------------------------------------------------------ */

/* A record sequence being built: the store the records are prepared from
 * and applied to, and the framed bytes so far. */
typedef struct seq_builder {
    obj_store *st;
    fuzz_buf out;
    int rc;       /* the first failure; later steps do nothing */
    uint64_t now;
} seq_builder;

/* Apply r (when prepare returned rc == SMP_OK) and frame it into the
 * sequence. Frees r. */
static void emit(seq_builder *b, obj_record *r, int rc)
{
    uint8_t hdr[3];
    if (b->rc == SMP_OK && rc == SMP_OK && r->len > 0xffff) rc = SMP_ERANGE;
    if (b->rc == SMP_OK && rc == SMP_OK)
        rc = obj_apply_record(b->st, r->type, r->encver, r->buf, r->len);
    if (b->rc == SMP_OK && rc == SMP_OK) {
        hdr[0] = (uint8_t)(r->type | (r->encver != OBJ_REC_ENCVER ? 8 : 0));
        hdr[1] = (uint8_t)r->len;
        hdr[2] = (uint8_t)(r->len >> 8);
        rc = fuzz_buf_write(&b->out, hdr, sizeof(hdr));
        if (rc == SMP_OK && r->len > 0) rc = fuzz_buf_write(&b->out, r->buf, r->len);
    }
    if (b->rc == SMP_OK) b->rc = rc;
    obj_record_free(r);
}

static void put(seq_builder *b, const char *key, uint64_t size, const char *group,
                const char *tenant)
{
    obj_put_params p = {key, size, SMP_DATA_WEIGHT, group, tenant, 0, 0, NULL, 0};
    uint8_t sum[32];
    obj_record r = {0};
    int rc;
    memset(sum, 0x5a, sizeof(sum));
    if (b->rc != SMP_OK) return;
    b->now++;
    if ((rc = obj_put_start(b->st, &p, b->now, NULL)) != SMP_OK) {
        b->rc = rc;
        return;
    }
    emit(b, &r, obj_prepare_put_end(b->st, key, sum, b->now, &r));
}

/* A second memory replica of key on node: reserve, then the add record. */
static void add_replica(seq_builder *b, const char *key, const char *node)
{
    obj_put_ticket t;
    obj_record r = {0};
    int rc;
    if (b->rc != SMP_OK) return;
    if ((rc = obj_reserve_replica(b->st, key, node, ++b->now, &t)) != SMP_OK) {
        b->rc = rc;
        return;
    }
    emit(b, &r, obj_prepare_add_replica(b->st, key, &t, &r));
}

/* Key's replicas plus a complete cold one on node. */
static void add_cold(seq_builder *b, const char *key, const char *node)
{
    obj_replica reps[REPS_CAP + 1];
    size_t n = 0;
    obj_record r = {0};
    int rc;
    if (b->rc != SMP_OK) return;
    if ((rc = obj_object_replicas(b->st, key, reps, REPS_CAP, &n)) != SMP_OK || n >= REPS_CAP) {
        b->rc = rc != SMP_OK ? rc : SMP_ERANGE;
        return;
    }
    reps[n] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, node, NULL, 0,
                            reps[0].length, "/cold/kv-one"};
    emit(b, &r, obj_prepare_set_replicas(b->st, key, reps, n + 1, &r));
}

/* A put that ends in a PUT_REVOKE record. */
static void revoked_put(seq_builder *b, const char *key)
{
    obj_put_params p = {key, 300, SMP_DATA_KV, NULL, NULL, 0, 0, NULL, 0};
    obj_record r = {0};
    int rc;
    if (b->rc != SMP_OK) return;
    if ((rc = obj_put_start(b->st, &p, ++b->now, NULL)) != SMP_OK) {
        b->rc = rc;
        return;
    }
    emit(b, &r, obj_prepare_put_revoke(b->st, key, &r));
}

/* A put still in flight, handed on in a PUT_HANDOFF record. */
static void handed_put(seq_builder *b, const char *key)
{
    obj_put_params p = {key, 700, SMP_DATA_KV, NULL, "tenant-a", 0, 0, NULL, 0};
    obj_record r = {0};
    size_t n = 0;
    int rc;
    if (b->rc != SMP_OK) return;
    if ((rc = obj_put_start(b->st, &p, ++b->now, NULL)) != SMP_OK) {
        b->rc = rc;
        return;
    }
    emit(b, &r, obj_prepare_put_handoff(b->st, &r, &n));
}

/* A put placed in a write zone, left open: the zone's WRITE_ZONES record. */
static void zoned_put(seq_builder *b, const char *key)
{
    obj_put_params p = {key, 900, SMP_DATA_KV, NULL, NULL, 0, 0, NULL, 0};
    obj_put_ticket t;
    obj_record r = {0};
    int rc;
    if (b->rc != SMP_OK) return;
    obj_zones_enable(b->st, 1);
    rc = obj_put_start(b->st, &p, ++b->now, &t);
    obj_zones_enable(b->st, 0);
    if (rc != SMP_OK) {
        b->rc = rc;
        return;
    }
    emit(b, &r, obj_prepare_write_zones(b->st, t.segment, 0, &r));
}

static void remove_prefix(seq_builder *b, const char *prefix)
{
    obj_record_list l = {0};
    int rc;
    if (b->rc != SMP_OK) return;
    if ((rc = obj_prepare_remove_prefix(b->st, prefix, ++b->now, &l, NULL)) != SMP_OK)
        b->rc = rc;
    for (size_t i = 0; i < l.n; i++) emit(b, &l.recs[i], SMP_OK);
    obj_record_list_free(&l);
}

/* The store's life in records: segments, puts, replicas, a managed group;
 * *mid is how many framed bytes there are before the removals start. */
static int build_sequence(seq_builder *b, size_t *mid)
{
    obj_record r = {0};
    obj_store *st = b->st;
    emit(b, &r, obj_prepare_segment_mount(st, "seg-a", "node-a", 1 << 20, &r));
    emit(b, &r, obj_prepare_segment_mount(st, "seg-b", "node-b", 1 << 20, &r));
    emit(b, &r, obj_prepare_segment_update(st, "seg-a", 2 << 20, &r));
    put(b, "kv/one", 100, NULL, "tenant-a");
    put(b, "kv/two", 4096, NULL, NULL);
    put(b, "w/model/rev1/manifest", 512, "w/model/rev1", "tenant-a");
    put(b, "w/model/rev1/obj-0", 8192, "w/model/rev1", "tenant-a");
    add_replica(b, "kv/one", "node-b");
    add_cold(b, "kv/one", "node-a");
    emit(b, &r, obj_prepare_set_pin(st, "kv/one", 1, &r));
    emit(b, &r, obj_prepare_group_managed(st, "w/model/rev1", "weight_mgmt", 1, &r));
    revoked_put(b, "kv/revoked");
    handed_put(b, "kv/handed");
    zoned_put(b, "kv/zoned");
    *mid = b->out.n;
    emit(b, &r, obj_prepare_remove(st, "kv/two", ++b->now, &r));
    remove_prefix(b, "w/");
    emit(b, &r, obj_prepare_group_managed(st, "w/model/rev1", "weight_mgmt", 0, &r));
    emit(b, &r, obj_prepare_segment_unmount(st, "seg-b", &r));
    return b->rc;
}

int fuzz_seeds(const char *dir)
{
    seq_builder b = {NULL, {0}, SMP_OK, 1000};
    size_t mid = 0;
    int n = 0, rc;
    if (obj_store_create(&b.st, NULL) != SMP_OK || build_sequence(&b, &mid) != SMP_OK) {
        fprintf(stderr, "fuzz_host_records: cannot build the seed sequence: %s\n",
                smp_strerror(b.rc));
        n = -1;
        goto out;
    }
    if ((rc = fuzz_seed(dir, "whole-life", b.out.p, b.out.n)) < 0) goto fail;
    n += rc;
    if ((rc = fuzz_seed(dir, "populated", b.out.p, mid)) < 0) goto fail;
    n += rc;
    goto out;
fail:
    n = -1;
out:
    free(b.out.p);
    obj_store_destroy(b.st);
    return n;
}
