/* test_obj_snap_decode.c -- unit tests of the host objects section's
 * hand-written decoder (host_shim/master/obj_snap_decode.c) and of the
 * snapshot load built on it (obj_store_load):
 *  - crafted sections -- every wire-format rule protobuf-c applies (tags,
 *    varints, length prefixes, wire types, unknown fields, repeated and
 *    last-wins fields, bools of any wire type) -- get the same verdict and
 *    the same records from the decoder as from protobuf-c's unpack;
 *  - a load of each refused section, of a section whose bad bytes follow
 *    good records, and of a snapshot object carrying add_replica, fails with
 *    SMP_EPROTO and leaves the store empty (a valid section loads after);
 *  - a section in another field order than obj_store_save writes (objects
 *    before segments, format last) loads as protobuf-c's arrays did. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "host_records.pb-c.h"
#include "obj_snap_same.h"
#include "obj_store.h"
#include "obj_store_internal.h"

/* ------------------------------------------------------------------------ */
/* Building sections                                                         */
/* ------------------------------------------------------------------------ */

typedef struct sbuf {
    uint8_t p[1 << 17];
    size_t n;
} sbuf;

static void put_bytes(sbuf *b, const void *p, size_t n)
{
    assert_true(b->n + n <= sizeof(b->p));
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_varint(sbuf *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    while (v >= 0x80) {
        t[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    t[n++] = (uint8_t)v;
    put_bytes(b, t, n);
}

/* msg as field `field` of the section. */
static void put_msg(sbuf *b, uint32_t field, const ProtobufCMessage *msg)
{
    uint8_t tmp[1024];
    size_t n = protobuf_c_message_get_packed_size(msg);
    assert_true(n <= sizeof(tmp));
    protobuf_c_message_pack(msg, tmp);
    put_varint(b, ((uint64_t)field << 3) | 2);
    put_varint(b, n);
    put_bytes(b, tmp, n);
}

static void put_format(sbuf *b, uint64_t format)
{
    put_varint(b, 1 << 3);
    put_varint(b, format);
}

static const uint8_t sum32[32] = {1, 2, 3};

static void put_segment(sbuf *b)
{
    Hostrec__SegmentRecord m = HOSTREC__SEGMENT_RECORD__INIT;
    m.id = "seg-0";
    m.node = "node-a";
    m.capacity = 1 << 20;
    put_msg(b, 2, &m.base);
}

static void put_group(sbuf *b)
{
    Hostrec__GroupRecord m = HOSTREC__GROUP_RECORD__INIT;
    m.name = "w/rev1";
    m.managed = 1;
    m.owner = "weight_mgmt";
    put_msg(b, 3, &m.base);
}

/* An object with a memory replica on seg-0 at offset off and a cold one. */
static void put_object(sbuf *b, const char *key, uint64_t off, int add_replica)
{
    Hostrec__Replica mem = HOSTREC__REPLICA__INIT, cold = HOSTREC__REPLICA__INIT;
    Hostrec__Replica *reps[2] = {&mem, &cold};
    mem.kind = SMP_REPLICA_MEMORY;
    mem.status = 1;
    mem.node = "node-a";
    mem.segment = "seg-0";
    mem.offset = off;
    mem.length = 100;
    cold.kind = SMP_REPLICA_COLD;
    cold.status = 1;
    cold.node = "node-a";
    cold.path = "cold/x";
    cold.length = 100;
    Hostrec__ObjectRecord m = HOSTREC__OBJECT_RECORD__INIT;
    m.key = (char *)key;
    m.size = 100;
    m.data_type = SMP_DATA_WEIGHT;
    m.group = "w/rev1";
    m.tenant = "t";
    m.checksum.data = (uint8_t *)sum32;
    m.checksum.len = 32;
    m.last_access_ms = 7;
    m.put_id = 3;
    m.n_replicas = 2;
    m.replicas = reps;
    if (add_replica) m.add_replica = &mem;
    put_msg(b, 4, &m.base);
}

/* A valid section: format, a segment, a managed group, two objects. */
static void put_valid(sbuf *b)
{
    put_format(b, OBJ_SNAPSHOT_FORMAT);
    put_segment(b);
    put_group(b);
    put_object(b, "w/rev1/a", 0, 0);
    put_object(b, "w/rev1/b", 4096, 0);
}

static obj_store *new_store(void)
{
    obj_store *st = NULL;
    assert_int_equal(obj_store_create(&st, NULL), SMP_OK);
    return st;
}

typedef struct save_buf {
    uint8_t *p;
    size_t n;
} save_buf;

static int save_write(void *ctx, const void *p, size_t n)
{
    save_buf *b = ctx;
    uint8_t *np = realloc(b->p, b->n + n + 1);
    if (np == NULL) return SMP_ENOMEM;
    memcpy(np + b->n, p, n);
    b->p = np;
    b->n += n;
    return SMP_OK;
}

/* The state of st as its saved section. */
static save_buf saved(const obj_store *st)
{
    save_buf b = {NULL, 0};
    assert_int_equal(obj_store_save(st, save_write, &b), SMP_OK);
    return b;
}

/* st holds nothing: it saves as a fresh store does. */
static void assert_empty(const obj_store *st)
{
    obj_store *e = new_store();
    save_buf a = saved(st), b = saved(e);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.p, b.p, a.n);
    free(a.p);
    free(b.p);
    obj_store_destroy(e);
}

/* ------------------------------------------------------------------------ */
/* Crafted sections                                                          */
/* ------------------------------------------------------------------------ */

typedef struct crafted {
    const char *what;
    uint8_t bytes[32];
    size_t n;
    int accepted; /* what protobuf-c (and so the decoder) says */
} crafted;

/* Each after a valid prefix (format 1); the comment names the rule. */
static const crafted cases[] = {
    {"tag 0 (field bits zero)", {0x00, 0x01}, 2, 0},
    {"tag of wire type 1 with field 0", {0x01, 0, 0, 0, 0, 0, 0, 0, 0}, 9, 0},
    {"tag of 6 bytes", {0x88, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00}, 7, 0},
    {"tag of 5 bytes (an unknown field)", {0x88, 0x80, 0x80, 0x80, 0x10, 0x01}, 6, 1},
    {"tag cut off", {0x88}, 1, 0},
    {"varint of 11 bytes",
     {0x28, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 12, 0},
    {"varint cut off", {0x28, 0x80}, 2, 0},
    {"64-bit value cut off", {0x29, 1, 2, 3}, 4, 0},
    {"32-bit value cut off", {0x2d, 1, 2}, 3, 0},
    {"wire type 3 (start group)", {0x2b, 0x00}, 2, 0},
    {"wire type 4 (end group)", {0x2c}, 1, 0},
    {"wire type 6", {0x2e}, 1, 0},
    {"wire type 7", {0x2f}, 1, 0},
    {"length prefix of 6 bytes", {0x2a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 7, 0},
    {"length above INT_MAX", {0x2a, 0x80, 0x80, 0x80, 0x80, 0x08}, 6, 0},
    {"length past the end", {0x2a, 0x05, 0x00}, 3, 0},
    {"unknown fields of each wire type",
     {0x38, 0x01, 0x39, 1, 2, 3, 4, 5, 6, 7, 8, 0x3a, 0x01, 0x00, 0x3d, 1, 2, 3, 4}, 19, 1},
    {"format as a length-delimited field", {0x0a, 0x00}, 2, 0},
    {"format again, 10-byte varint (last wins, low 32 bits)",
     {0x08, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 11, 1},
    {"objects as a varint", {0x20, 0x01}, 2, 0},
    {"open put", {0x2a, 0x05, 0x0a, 0x01, 'k', 0x48, 0x40}, 7, 1},
    {"open put: key as a varint", {0x2a, 0x02, 0x08, 0x01}, 4, 0},
    {"open put: offset as length-delimited", {0x2a, 0x02, 0x4a, 0x00}, 4, 0},
    {"segments as 32-bit", {0x15, 1, 2, 3, 4}, 5, 0},
    {"object: key as a varint", {0x22, 0x02, 0x08, 0x01}, 4, 0},
    {"object: size as length-delimited", {0x22, 0x02, 0x12, 0x00}, 4, 0},
    {"object: replica as a varint", {0x22, 0x02, 0x48, 0x01}, 4, 0},
    {"object: replica with a bad tag", {0x22, 0x03, 0x4a, 0x01, 0x00}, 5, 0},
    {"object: replica's node as 64-bit", {0x22, 0x0b, 0x4a, 0x09, 0x19, 1, 2, 3, 4, 5, 6, 7, 8},
     13, 0},
    {"object: add_replica as a varint", {0x22, 0x02, 0x60, 0x01}, 4, 0},
    {"object: add_replica with a cut varint", {0x22, 0x04, 0x62, 0x02, 0x08, 0x80}, 6, 0},
    {"object: hard_pinned as fixed32", {0x22, 0x05, 0x3d, 0, 0, 1, 0}, 7, 1},
    {"object: hard_pinned as empty bytes (the prefix counts)", {0x22, 0x02, 0x3a, 0x00}, 4, 1},
    {"object: key twice, embedded NUL", {0x22, 0x08, 0x0a, 0x01, 'a', 0x0a, 0x03, 'b', 0, 'c'},
     10, 1},
    {"object: empty checksum, empty replica", {0x22, 0x04, 0x32, 0x00, 0x4a, 0x00}, 6, 1},
    {"group: managed as a 64-bit zero", {0x1a, 0x09, 0x11, 0, 0, 0, 0, 0, 0, 0, 0}, 11, 1},
    {"group: name as 32-bit", {0x1a, 0x05, 0x0d, 1, 2, 3, 4}, 7, 0},
    {"segment: capacity as 64-bit", {0x12, 0x09, 0x19, 1, 2, 3, 4, 5, 6, 7, 8}, 11, 0},
    {"zones as a varint", {0x30, 0x01}, 2, 0},
    {"zones: offsets packed, a length not",
     {0x32, 0x09, 0x0a, 0x01, 's', 0x12, 0x01, 0x40, 0x18, 0x80, 0x01}, 11, 1},
    {"zones: an offset cut off", {0x32, 0x03, 0x12, 0x01, 0x80}, 5, 0},
};

/* Each crafted case after a valid section agrees with protobuf-c, and
 * protobuf-c says what the table says. */
static void test_same_as_protobuf_c(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sbuf b = {{0}, 0};
        put_valid(&b);
        put_bytes(&b, cases[i].bytes, cases[i].n);
        Hostrec__HostSnapshot *ref = hostrec__host_snapshot__unpack(NULL, b.n, b.p);
        if ((ref != NULL) != cases[i].accepted) fail_msg("protobuf-c on '%s'", cases[i].what);
        if (ref) hostrec__host_snapshot__free_unpacked(ref, NULL);
        if (!obj_snap_same(b.p, b.n)) fail_msg("decoder and protobuf-c differ on '%s'",
                                               cases[i].what);
    }
    sbuf b = {{0}, 0};
    put_valid(&b);
    put_object(&b, "w/rev1/c", 8192, 1);
    assert_true(obj_snap_same(b.p, b.n));
    assert_true(obj_snap_same(NULL, 0));
}

/* A refused section -- bad bytes anywhere, even after records that would
 * apply -- fails the load with SMP_EPROTO and changes nothing. */
static void test_load_refused_leaves_store_empty(void **state)
{
    (void)state;
    obj_store *st = new_store();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cases[i].accepted) continue;
        sbuf b = {{0}, 0};
        put_valid(&b);
        put_bytes(&b, cases[i].bytes, cases[i].n);
        if (obj_store_load(st, b.p, b.n) != SMP_EPROTO) fail_msg("loaded '%s'", cases[i].what);
        assert_empty(st);
    }
    /* A snapshot's object never carries add_replica. */
    sbuf b = {{0}, 0};
    put_valid(&b);
    put_object(&b, "w/rev1/c", 8192, 1);
    assert_int_equal(obj_store_load(st, b.p, b.n), SMP_EPROTO);
    assert_empty(st);
    /* A wrong format given last overrides a right one given first. */
    b.n = 0;
    put_valid(&b);
    put_format(&b, OBJ_SNAPSHOT_FORMAT + 1);
    assert_int_equal(obj_store_load(st, b.p, b.n), SMP_EPROTO);
    assert_empty(st);
    /* No format at all. */
    b.n = 0;
    put_segment(&b);
    assert_int_equal(obj_store_load(st, b.p, b.n), SMP_EPROTO);
    assert_empty(st);
    /* And the store still loads a valid section. */
    b.n = 0;
    put_valid(&b);
    assert_int_equal(obj_store_load(st, b.p, b.n), SMP_OK);
    assert_int_equal(obj_group_count(st, "w/rev1"), 2);
    obj_store_destroy(st);
}

/* Records in another order than a save writes them (objects first, the
 * segment they live on after, the format last; accepted unknown and
 * repeated fields) load into the state of the ordered section. */
static void test_load_any_field_order(void **state)
{
    (void)state;
    sbuf a = {{0}, 0}, b = {{0}, 0};
    put_valid(&a);
    put_object(&b, "w/rev1/b", 4096, 0);
    put_group(&b);
    put_bytes(&b, cases[16].bytes, cases[16].n); /* unknown fields */
    put_object(&b, "w/rev1/a", 0, 0);
    put_format(&b, 9);
    put_segment(&b);
    put_format(&b, OBJ_SNAPSHOT_FORMAT);
    assert_true(obj_snap_same(b.p, b.n));
    obj_store *x = new_store(), *y = new_store();
    assert_int_equal(obj_store_load(x, a.p, a.n), SMP_OK);
    assert_int_equal(obj_store_load(y, b.p, b.n), SMP_OK);
    save_buf sx = saved(x), sy = saved(y);
    assert_int_equal(sx.n, sy.n);
    assert_memory_equal(sx.p, sy.p, sx.n);
    /* And a save loads back to the same bytes. */
    obj_store *z = new_store();
    assert_int_equal(obj_store_load(z, sx.p, sx.n), SMP_OK);
    save_buf sz = saved(z);
    assert_int_equal(sz.n, sx.n);
    assert_memory_equal(sz.p, sx.p, sx.n);
    free(sx.p);
    free(sy.p);
    free(sz.p);
    obj_store_destroy(x);
    obj_store_destroy(y);
    obj_store_destroy(z);
}

/* A section whose objects take more than one slab (a load maps them in
 * chunks of the section's size, at least 64 KiB) loads every object, in
 * one decode of a section in save order as in one decode per field of a
 * reordered one; bytes refused inside the last record, after every other
 * object was applied, fail the load and clear the objects of every chunk. */
static void test_load_objects_across_slab_chunks(void **state)
{
    (void)state;
    enum { N = 600 }; /* some 270 bytes each in a slab, 110 in the section */
    sbuf *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    char key[32];
    assert_non_null(a);
    assert_non_null(b);
    put_format(a, OBJ_SNAPSHOT_FORMAT);
    put_segment(a);
    put_group(a);
    for (int k = 0; k < N; k++) {
        snprintf(key, sizeof(key), "w/rev1/o%03d", k);
        put_object(a, key, (uint64_t)k * 128, 0);
        put_object(b, key, (uint64_t)k * 128, 0);
    }
    assert_true(a->n * 2 < (size_t)N * 272); /* a chunk is a->n bytes: several */
    put_group(b);
    put_segment(b);
    put_format(b, OBJ_SNAPSHOT_FORMAT);
    obj_store *x = new_store(), *y = new_store();
    assert_int_equal(obj_store_load(x, a->p, a->n), SMP_OK);
    assert_int_equal(obj_group_count(x, "w/rev1"), N);
    /* The skip-list nodes of the objects and of their group's members are
     * taken from the slab of their object, but where it had no room left. */
    obj_group *g = obj_sl_get(&x->groups, "w/rev1");
    assert_non_null(g);
    const obj_sl *lists[] = {&x->objects, &g->members};
    for (size_t l = 0; l < 2; l++) {
        size_t in_slab = 0;
        for (obj_sl_node *n = lists[l]->head->next[0]; n != NULL; n = n->next[0]) {
            const obj_object *o = n->val;
            assert_non_null(o->slab);
            if (n->slab == NULL) continue;
            assert_ptr_equal(n->slab, o->slab);
            assert_true((const char *)n > (const char *)n->slab &&
                        (const char *)n < (const char *)n->slab + n->slab->used);
            in_slab++;
        }
        assert_true(in_slab + 8 >= (size_t)N);
    }
    assert_int_equal(obj_store_load(y, b->p, b->n), SMP_OK);
    save_buf sx = saved(x), sy = saved(y);
    assert_int_equal(sx.n, sy.n);
    assert_memory_equal(sx.p, sy.p, sx.n);
    obj_store *z = new_store();
    assert_int_equal(obj_store_load(z, sx.p, sx.n), SMP_OK);
    assert_int_equal(obj_group_count(z, "w/rev1"), N);
    free(sx.p);
    free(sy.p);
    obj_store_destroy(x);
    obj_store_destroy(y);
    obj_store_destroy(z);
    /* An object record whose field 1 is a varint cut short (protobuf-c
     * refuses it), after all N: the framing is whole, the record is not. */
    static const uint8_t cut[] = {0x22, 0x02, 0x08, 0x80};
    put_bytes(a, cut, sizeof(cut));
    assert_true(obj_snap_same(a->p, a->n));
    obj_store *w = new_store();
    assert_int_equal(obj_store_load(w, a->p, a->n), SMP_EPROTO);
    assert_empty(w);
    a->n -= sizeof(cut);
    assert_int_equal(obj_store_load(w, a->p, a->n), SMP_OK);
    assert_int_equal(obj_group_count(w, "w/rev1"), N);
    obj_store_destroy(w);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_protobuf_c),
        cmocka_unit_test(test_load_refused_leaves_store_empty),
        cmocka_unit_test(test_load_any_field_order),
        cmocka_unit_test(test_load_objects_across_slab_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
