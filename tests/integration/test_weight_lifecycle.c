/* test_weight_lifecycle.c -- the reconcile tick on a real master with the
 * real weight_mgmt.so and real nodes.
 *
 * Revisions are published with raw service-16 RPCs and kv_client uploads (as
 * in test_weight_publish.c); then the lifecycle is watched from outside:
 * GET_METADATA / GET_OPERATION polling with a generous bound, and the
 * replicas of every member through kvc_get. Pinned here: READY is published
 * HOT and converges to the preferred residency; every explicit HOT / COLD /
 * MIXED path; the manifest keeps its memory replica; a lease keeps memory
 * replicas during a migration to COLD and blocks removal; removal runs to a
 * queryable tombstone with an empty group; a cold write that fails keeps the
 * revision READY and the operation retrying until the disk is usable again;
 * a killed node makes a revision DEGRADED and its return makes it READY;
 * SIGKILL of the master in the middle of a migration, of a deletion and of
 * an import. Rounds are small (2 members) and ticks fast (50 ms) so large
 * operations take several rounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "node_cold.h"
#include "rpc_client.h"
#include "weight_rpc.pb-c.h"

/* The RFC's codes as weight_management.h numbers them. */
#define E_INVALID_ARGUMENT -101
#define E_NOT_FOUND -102
#define E_NOT_READY -103
#define E_CONFLICT -104
#define E_STALE_GENERATION -105
#define E_BUSY -106
#define E_LEASE_EXPIRED -107
#define E_POLICY_UNSATISFIABLE -109

enum { AV_IMPORTING = 1, AV_READY = 2, AV_DEGRADED = 3, AV_DELETING = 4, AV_DELETED = 5 };
enum { RS_UNKNOWN = 0, RS_HOT = 1, RS_COLD = 2, RS_MIXED = 3, RS_ABSENT = 4 };
enum { MODE_PINNED = 1, MODE_MANUAL = 2, MODE_AUTO = 3 };
enum { OPK_MIGRATING = 1, OPK_DELETING = 3 };

#define SVC 16

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct fixture {
    hx_master m;
    rpcc_conn *rpc;
    kvc *kv;
    char last_error[1024];
} fixture;

static void connect_clients(fixture *f)
{
    char err[256];
    assert_int_equal(rpcc_connect(f->m.socket, NULL, &f->rpc, err, sizeof(err)), 0);
    f->kv = hx_client(&f->m);
    assert_non_null(f->kv);
}

static void disconnect_clients(fixture *f)
{
    rpcc_close(f->rpc);
    f->rpc = NULL;
    if (f->kv) kvc_close(f->kv);
    f->kv = NULL;
}

/* Call method with req; returns the status. On success *out is the body
 * (caller frees); on failure the body's sentence is kept in f->last_error. */
static int call(fixture *f, uint32_t method, const ProtobufCMessage *req, uint8_t **out, size_t *out_len)
{
    size_t n = req ? protobuf_c_message_get_packed_size(req) : 0;
    uint8_t *buf = malloc(n ? n : 1);
    if (req) protobuf_c_message_pack(req, buf);
    int status = -1;
    uint8_t *body = NULL;
    size_t blen = 0;
    char *msg = NULL;
    assert_int_equal(rpcc_call(f->rpc, SVC, method, buf, n, &status, &body, &blen, &msg), 0);
    free(buf);
    free(msg);
    f->last_error[0] = '\0';
    if (status != 0) {
        snprintf(f->last_error, sizeof(f->last_error), "%.*s", (int)blen, body ? (char *)body : "");
        free(body);
        body = NULL;
        blen = 0;
    }
    if (out) *out = body;
    else free(body);
    if (out_len) *out_len = blen;
    return status;
}

static void set_identity(Wmrpc__WeightIdentity *id, const char *tenant, const char *ns, const char *res,
                         uint64_t gen)
{
    wmrpc__weight_identity__init(id);
    id->tenant = (char *)tenant;
    id->namespace_id = (char *)ns;
    id->resource_id = (char *)res;
    id->revision = (char *)"main";
    id->generation = gen;
}

/* IMPORT_BEGIN: status; on success the metadata (caller frees). */
static int begin(fixture *f, const Wmrpc__WeightIdentity *id, int preferred, double ratio, int mode,
                 Wmrpc__WeightMetadata **out)
{
    Wmrpc__ImportBeginRequest req = WMRPC__IMPORT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightPolicy pol = WMRPC__WEIGHT_POLICY__INIT;
    pol.preferred_residency = (uint32_t)preferred;
    pol.mixed_hot_ratio = ratio;
    pol.migration_mode = (uint32_t)mode;
    req.identity = (Wmrpc__WeightIdentity *)id;
    req.policy = &pol;
    uint8_t *body = NULL;
    size_t len = 0;
    int st = call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_BEGIN, &req.base, &body, &len);
    if (st == 0) {
        Wmrpc__ImportBeginResponse *r = wmrpc__import_begin_response__unpack(NULL, len, body);
        assert_non_null(r);
        assert_non_null(r->metadata);
        if (out) {
            *out = r->metadata;
            r->metadata = NULL;
        }
        wmrpc__import_begin_response__free_unpacked(r, NULL);
    }
    free(body);
    return st;
}

/* A revision's uploads: n payloads of the given sizes, in units of `per_unit`
 * consecutive payloads, and the manifest bytes. */
typedef struct upload {
    char group[1100];
    char manifest[1100];
    size_t n;
    uint64_t sizes[128];
    size_t per_unit;
    unsigned char manifest_sha[32];
    char manifest_body[64];
} upload;

static void payload_key(const upload *u, size_t i, char *out, size_t cap)
{
    snprintf(out, cap, "%s/payload/%zu", u->group, i);
}

/* Upload the payloads and the manifest into the revision's group. skip:
 * an index not uploaded (-1: none); extra: an additional payload index
 * uploaded (-1: none). */
static void put_some(fixture *f, upload *u, const Wmrpc__WeightMetadata *md, long skip, long extra)
{
    snprintf(u->group, sizeof(u->group), "%s", md->group_key);
    snprintf(u->manifest, sizeof(u->manifest), "%s", md->manifest_key);
    for (size_t i = 0; i < u->n + 1; i++) {
        if ((long)i == skip) continue;
        if (i == u->n && extra < 0) break;
        size_t idx = i == u->n ? (size_t)extra : i;
        uint64_t size = i == u->n ? 100 : u->sizes[i];
        char key[1200];
        payload_key(u, idx, key, sizeof(key));
        unsigned char *data = malloc(size);
        for (uint64_t b = 0; b < size; b++) data[b] = (unsigned char)(idx * 31 + b);
        int rc = kvc_put_bytes(f->kv, key, data, size, SMP_DATA_WEIGHT, u->group, 0, NULL);
        if (rc != 0) fail_msg("put %s: %d %s", key, rc, kvc_error(f->kv));
        free(data);
    }
    snprintf(u->manifest_body, sizeof(u->manifest_body), "manifest %s",
             md->identity ? md->identity->resource_id : "?");
    hx_sha256(u->manifest_body, strlen(u->manifest_body), u->manifest_sha);
    int rc = kvc_put_bytes(f->kv, u->manifest, u->manifest_body, strlen(u->manifest_body),
                           SMP_DATA_METADATA, u->group, 0, NULL);
    if (rc != 0) fail_msg("put manifest: %d %s", rc, kvc_error(f->kv));
}

static void put_all(fixture *f, upload *u, const Wmrpc__WeightMetadata *md)
{
    put_some(f, u, md, -1, -1);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Knobs for a commit that lies about one thing. */
typedef struct lies {
    int count_delta;
    int64_t bytes_delta;
    int bad_keys_digest;
    int bad_manifest_sha;
    int bad_affinity_digest;
    int bad_unit_bytes;
} lies;

/* IMPORT_COMMIT with the summary computed from u; returns the status and,
 * on success, the response (caller frees). */
static int commit(fixture *f, const Wmrpc__WeightIdentity *id, uint64_t expected, const upload *u,
                  const lies *l, Wmrpc__MetadataResponse **out)
{
    static const lies none;
    if (l == NULL) l = &none;
    size_t count = u->n + (size_t)l->count_delta;
    char **keys = calloc(count ? count : 1, sizeof(char *));
    uint64_t bytes = 0;
    for (size_t i = 0; i < count; i++) {
        keys[i] = malloc(1200);
        payload_key(u, i, keys[i], 1200);
        if (i < u->n) bytes += u->sizes[i];
    }
    /* payload_keys_sha256: sorted keys, each followed by '\n'. */
    char **sorted = calloc(count ? count : 1, sizeof(char *));
    memcpy(sorted, keys, count * sizeof(char *));
    qsort(sorted, count, sizeof(char *), str_cmp);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char keys_sha[32], aff_sha[32], man_sha[32];
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (size_t i = 0; i < count; i++) {
        EVP_DigestUpdate(ctx, sorted[i], strlen(sorted[i]));
        EVP_DigestUpdate(ctx, "\n", 1);
    }
    EVP_DigestFinal_ex(ctx, keys_sha, NULL);
    if (l->bad_keys_digest) keys_sha[0] ^= 1;

    /* Units of per_unit consecutive payloads; affinity lines per unit. */
    size_t per = u->per_unit ? u->per_unit : 1;
    size_t n_units = (count + per - 1) / per;
    Wmrpc__AffinityUnit *units = calloc(n_units ? n_units : 1, sizeof(*units));
    Wmrpc__AffinityUnit **uptr = calloc(n_units ? n_units : 1, sizeof(*uptr));
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (size_t k = 0; k < n_units; k++) {
        wmrpc__affinity_unit__init(&units[k]);
        size_t first = k * per, last = first + per < count ? first + per : count;
        units[k].n_members = last - first;
        units[k].members = &keys[first];
        for (size_t i = first; i < last; i++) units[k].logical_bytes += i < u->n ? u->sizes[i] : 0;
        if (l->bad_unit_bytes && k == 0) units[k].logical_bytes += 1;
        char line[128];
        snprintf(line, sizeof(line), "unit %llu %zu\n", (unsigned long long)units[k].logical_bytes,
                 units[k].n_members);
        EVP_DigestUpdate(ctx, line, strlen(line));
        for (size_t i = first; i < last; i++) {
            EVP_DigestUpdate(ctx, keys[i], strlen(keys[i]));
            EVP_DigestUpdate(ctx, "\n", 1);
        }
        uptr[k] = &units[k];
    }
    EVP_DigestFinal_ex(ctx, aff_sha, NULL);
    EVP_MD_CTX_free(ctx);
    if (l->bad_affinity_digest) aff_sha[3] ^= 1;
    memcpy(man_sha, u->manifest_sha, 32);
    if (l->bad_manifest_sha) man_sha[5] ^= 1;

    Wmrpc__ImportCommitRequest req = WMRPC__IMPORT_COMMIT_REQUEST__INIT;
    req.identity = (Wmrpc__WeightIdentity *)id;
    req.expected_metadata_generation = expected;
    req.payload_count = count;
    req.logical_bytes = (uint64_t)((int64_t)bytes + l->bytes_delta);
    req.payload_keys_sha256.data = keys_sha;
    req.payload_keys_sha256.len = 32;
    req.manifest_key = (char *)u->manifest;
    req.manifest_sha256.data = man_sha;
    req.manifest_sha256.len = 32;
    req.n_units = n_units;
    req.units = uptr;
    req.affinity_sha256.data = aff_sha;
    req.affinity_sha256.len = 32;
    uint8_t *body = NULL;
    size_t len = 0;
    int st = call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_COMMIT, &req.base, &body, &len);
    if (st == 0 && out) {
        *out = wmrpc__metadata_response__unpack(NULL, len, body);
        assert_non_null(*out);
    }
    free(body);
    for (size_t i = 0; i < count; i++) free(keys[i]);
    free(keys);
    free(sorted);
    free(units);
    free(uptr);
    return st;
}

/* An IdentityRequest method answered with a MetadataResponse. */
static int ident_call(fixture *f, uint32_t method, const Wmrpc__WeightIdentity *id, uint64_t expected,
                      Wmrpc__MetadataResponse **out)
{
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    req.identity = (Wmrpc__WeightIdentity *)id;
    req.expected_metadata_generation = expected;
    uint8_t *body = NULL;
    size_t len = 0;
    int st = call(f, method, &req.base, &body, &len);
    if (st == 0 && out) {
        *out = wmrpc__metadata_response__unpack(NULL, len, body);
        assert_non_null(*out);
    }
    free(body);
    return st;
}

static Wmrpc__MetadataResponse *get_md(fixture *f, const Wmrpc__WeightIdentity *id)
{
    Wmrpc__MetadataResponse *r = NULL;
    int st = ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, id, 0, &r);
    if (st != 0) fail_msg("get_metadata: %d %s", st, f->last_error);
    return r;
}

static int is_exist(fixture *f, const Wmrpc__WeightIdentity *id)
{
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    req.identity = (Wmrpc__WeightIdentity *)id;
    uint8_t *body = NULL;
    size_t len = 0;
    assert_int_equal(call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IS_EXIST, &req.base, &body, &len), 0);
    Wmrpc__IsExistResponse *r = wmrpc__is_exist_response__unpack(NULL, len, body);
    assert_non_null(r);
    int e = r->exists;
    wmrpc__is_exist_response__free_unpacked(r, NULL);
    free(body);
    return e;
}

static int lease_call(fixture *f, uint32_t method, const Wmrpc__WeightIdentity *id, uint64_t lease_id,
                      uint64_t ttl, Wmrpc__LeaseResponse **out)
{
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    req.identity = (Wmrpc__WeightIdentity *)id;
    req.lease_id = lease_id;
    req.ttl_ms = ttl;
    uint8_t *body = NULL;
    size_t len = 0;
    int st = call(f, method, &req.base, &body, &len);
    if (st == 0 && out) {
        *out = wmrpc__lease_response__unpack(NULL, len, body);
        assert_non_null(*out);
    }
    free(body);
    return st;
}

static int migrate(fixture *f, const Wmrpc__WeightIdentity *id, int target, uint64_t expected,
                   Wmrpc__MetadataResponse **out)
{
    Wmrpc__MigrateRequest req = WMRPC__MIGRATE_REQUEST__INIT;
    req.identity = (Wmrpc__WeightIdentity *)id;
    req.target_residency = (uint32_t)target;
    req.expected_metadata_generation = expected;
    uint8_t *body = NULL;
    size_t len = 0;
    int st = call(f, WMRPC__WEIGHT_METHOD__WEIGHT_MIGRATE, &req.base, &body, &len);
    if (st == 0 && out) *out = wmrpc__metadata_response__unpack(NULL, len, body);
    free(body);
    return st;
}

static Wmrpc__OperationResponse *get_op(fixture *f, uint64_t op_id, int *status)
{
    Wmrpc__OperationRequest req = WMRPC__OPERATION_REQUEST__INIT;
    req.operation_id = op_id;
    uint8_t *body = NULL;
    size_t len = 0;
    *status = call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_OPERATION, &req.base, &body, &len);
    Wmrpc__OperationResponse *r = *status == 0 ? wmrpc__operation_response__unpack(NULL, len, body) : NULL;
    free(body);
    return r;
}

/* begin + upload + commit of a small revision; returns the commit result. */
static Wmrpc__MetadataResponse *publish(fixture *f, const Wmrpc__WeightIdentity *id, int preferred,
                                        int mode, upload *u)
{
    Wmrpc__WeightMetadata *md = NULL;
    assert_int_equal(begin(f, id, preferred, 0.5, mode, &md), 0);
    put_all(f, u, md);
    Wmrpc__MetadataResponse *r = NULL;
    int st = commit(f, id, md->metadata_generation, u, NULL, &r);
    if (st != 0) fail_msg("commit: %d %s", st, f->last_error);
    wmrpc__weight_metadata__free_unpacked(md, NULL);
    return r;
}
/* ------------------------------------------------------------------------ */
/* Lifecycle helpers                                                         */
/* ------------------------------------------------------------------------ */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

#define WAIT_MS 30000 /* generous: the machine is shared */

/* The embedded node with its cold files in <dir>/cold, fast polls, rounds of
 * `members` members and a 50 ms tick; `extra` is appended. */
static void start_lc(fixture *f, const char *name, unsigned members, const char *extra)
{
    char cfg[2048];
    assert_int_equal(hx_init(&f->m, name, NULL), 0);
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: 33554432\n"
             "  cold_dir: \"%s/cold\"\n  poll_ms: 10\n"
             "cluster:\n  weight_migration_cooldown_ms: 100\n"
             "  weight_migration_max_members_per_round: %u\n"
             "  weight_migration_max_bytes_per_round: 1048576\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n%s",
             f->m.dir, f->m.dir, members, BUILD_DIR, extra ? extra : "");
    assert_int_equal(hx_reconfigure(&f->m, cfg), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    connect_clients(f);
}

/* Memory and cold replicas of key as the master serves them (complete, on
 * live nodes). -1, -1 when the key does not exist. */
static void replicas(fixture *f, const char *key, int *mem, int *cold)
{
    kvc_object o;
    *mem = *cold = 0;
    int rc = kvc_get(f->kv, key, &o);
    if (rc == SMP_ENOTFOUND) {
        *mem = *cold = -1;
        return;
    }
    if (rc != 0) return;
    for (size_t i = 0; i < o.n_replicas; i++) {
        if (o.replicas[i].status != 1) continue; /* complete only */
        if (o.replicas[i].kind == SMP_REPLICA_MEMORY) (*mem)++;
        else (*cold)++;
    }
}

/* Poll until the operation is no longer RUNNING; returns it (caller frees). */
static Wmrpc__OperationResponse *wait_op(fixture *f, uint64_t op_id)
{
    uint64_t end = mono_ms() + WAIT_MS;
    for (;;) {
        int st;
        Wmrpc__OperationResponse *r = get_op(f, op_id, &st);
        if (st != 0) fail_msg("get_operation %llu: %d %s", (unsigned long long)op_id, st, f->last_error);
        if (r->operation->state != 1) return r;
        if (mono_ms() > end)
            fail_msg("operation %llu still RUNNING after %d ms (done %llu/%llu, attempts %u, error '%s')",
                     (unsigned long long)op_id, WAIT_MS, (unsigned long long)r->operation->members_done,
                     (unsigned long long)r->operation->members_total, r->operation->attempts,
                     r->operation->error ? r->operation->error : "");
        wmrpc__operation_response__free_unpacked(r, NULL);
        sleep_ms(20);
    }
}

/* Poll until the revision has availability `av` (and, when res >= 0, that
 * residency) with no active operation; returns its metadata response. */
static Wmrpc__MetadataResponse *wait_state(fixture *f, const Wmrpc__WeightIdentity *id, int av, int res)
{
    uint64_t end = mono_ms() + WAIT_MS;
    for (;;) {
        Wmrpc__MetadataResponse *r = get_md(f, id);
        if ((int)r->metadata->availability == av && (res < 0 || (int)r->metadata->residency == res) &&
            r->metadata->operation_id == 0)
            return r;
        if (mono_ms() > end)
            fail_msg("%s: availability %u residency %u operation %llu after %d ms (wanted %d/%d)",
                     r->metadata->group_key, r->metadata->availability, r->metadata->residency,
                     (unsigned long long)r->metadata->operation_id, WAIT_MS, av, res);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        sleep_ms(20);
    }
}

/* Explicit migration at the current generation (retried while another
 * mutation of the revision is being made durable); waits for the end and
 * checks it SUCCEEDED. Returns the metadata afterwards. */
static Wmrpc__MetadataResponse *migrate_and_wait(fixture *f, const Wmrpc__WeightIdentity *id, int target)
{
    Wmrpc__MetadataResponse *r = NULL;
    int st = E_BUSY;
    for (int i = 0; i < 200 && st == E_BUSY; i++) {
        Wmrpc__MetadataResponse *md = get_md(f, id);
        st = migrate(f, id, target, md->metadata->metadata_generation, &r);
        wmrpc__metadata_response__free_unpacked(md, NULL);
        if (st == E_BUSY || st == E_STALE_GENERATION) {
            st = E_BUSY;
            sleep_ms(20);
        }
    }
    if (st != 0) fail_msg("migrate to %d: %d %s", target, st, f->last_error);
    uint64_t op_id = r->metadata->operation_id;
    assert_true(op_id > 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    Wmrpc__OperationResponse *op = wait_op(f, op_id);
    assert_int_equal(op->operation->state, 2); /* SUCCEEDED */
    assert_int_equal(op->operation->members_done, op->operation->members_total);
    wmrpc__operation_response__free_unpacked(op, NULL);
    return wait_state(f, id, AV_READY, target);
}

/* Every payload of u is where `res` says (HOT: memory; COLD: cold and no
 * memory), the manifest keeps a memory replica; returns the bytes of the
 * payloads in memory. */
static uint64_t check_replicas(fixture *f, const upload *u, int res)
{
    uint64_t hot = 0;
    char key[1200];
    int mem, cold;
    for (size_t i = 0; i < u->n; i++) {
        payload_key(u, i, key, sizeof(key));
        replicas(f, key, &mem, &cold);
        if (res == RS_HOT && mem == 0) fail_msg("%s has no memory replica", key);
        if (res == RS_COLD && (mem != 0 || cold == 0))
            fail_msg("%s: %d memory and %d cold replicas (wanted cold only)", key, mem, cold);
        if (res == RS_MIXED && !((mem > 0 && cold == 0) || (mem == 0 && cold > 0) || (mem > 0 && cold > 0)))
            fail_msg("%s is not readable", key);
        if (mem > 0) hot += u->sizes[i];
    }
    replicas(f, u->manifest, &mem, &cold);
    if (mem == 0) fail_msg("the manifest %s lost its memory replica", u->manifest);
    return hot;
}

static uint64_t generation_of(fixture *f, const Wmrpc__WeightIdentity *id)
{
    Wmrpc__MetadataResponse *md = get_md(f, id);
    uint64_t g = md->metadata->metadata_generation;
    wmrpc__metadata_response__free_unpacked(md, NULL);
    return g;
}

static void release_lease(fixture *f, const Wmrpc__WeightIdentity *id, uint64_t lease_id)
{
    int st = E_BUSY;
    for (int i = 0; i < 200 && st == E_BUSY; i++) {
        st = lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, id, lease_id, 0, NULL);
        if (st == E_BUSY) sleep_ms(20);
    }
    assert_int_equal(st, 0);
}

static uint64_t acquire_lease(fixture *f, const Wmrpc__WeightIdentity *id)
{
    Wmrpc__LeaseResponse *lr = NULL;
    int st = E_BUSY;
    for (int i = 0; i < 200 && st == E_BUSY; i++) {
        st = lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, id, 0, 60000, &lr);
        if (st == E_BUSY) sleep_ms(20);
    }
    if (st != 0) fail_msg("lease: %d %s", st, f->last_error);
    uint64_t lid = lr->lease->id;
    wmrpc__lease_response__free_unpacked(lr, NULL);
    return lid;
}

static void sizes_fill(upload *u, size_t n, uint64_t base)
{
    u->n = n;
    for (size_t i = 0; i < n; i++) u->sizes[i] = base + 100 * i;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

/* Published READY + HOT, then converged by the tick: preferred COLD leaves
 * every payload with a verified cold replica and no memory replica (the
 * manifest keeps its memory replica); preferred MIXED keeps complete units
 * HOT nearest the ratio and reports it. PINNED converges too and then
 * refuses changes; MANUAL converges and then accepts an explicit one. */
static void test_publish_converges_to_preferred(void **state)
{
    fixture *f = *state;
    start_lc(f, "wl-conv", 4, NULL);
    struct {
        const char *name;
        int pref, mode;
    } cases[] = {
        {"cold-auto", RS_COLD, MODE_AUTO},
        {"mixed-auto", RS_MIXED, MODE_AUTO},
        {"cold-pinned", RS_COLD, MODE_PINNED},
        {"mixed-manual", RS_MIXED, MODE_MANUAL},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        Wmrpc__WeightIdentity id;
        set_identity(&id, "t1", "conv", cases[k].name, 1);
        upload u = {.n = 4, .sizes = {1000, 2000, 3000, 4000}, .per_unit = 1};
        Wmrpc__MetadataResponse *r = publish(f, &id, cases[k].pref, cases[k].mode, &u);
        assert_int_equal(r->metadata->availability, AV_READY);
        assert_int_equal(r->metadata->residency, RS_HOT);
        uint64_t op_id = r->metadata->operation_id;
        assert_true(op_id > 0);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        Wmrpc__OperationResponse *op = wait_op(f, op_id);
        assert_int_equal(op->operation->state, 2);
        assert_int_equal(op->operation->bytes_done, 10000);
        wmrpc__operation_response__free_unpacked(op, NULL);
        r = wait_state(f, &id, AV_READY, cases[k].pref);
        uint64_t hot = check_replicas(f, &u, cases[k].pref);
        if (cases[k].pref == RS_MIXED) {
            assert_true(r->metadata->observed_hot_ratio == 0.5);
            assert_int_equal(hot, 5000); /* units 1000 + 4000 or 2000 + 3000 */
        } else {
            assert_true(r->metadata->observed_hot_ratio == 0.0);
            assert_int_equal(hot, 0);
        }
        assert_int_equal(is_exist(f, &id), 1);
        if (cases[k].mode == MODE_PINNED)
            assert_int_equal(migrate(f, &id, RS_HOT, r->metadata->metadata_generation, NULL),
                             E_POLICY_UNSATISFIABLE);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        if (cases[k].mode == MODE_MANUAL) {
            r = migrate_and_wait(f, &id, RS_HOT);
            check_replicas(f, &u, RS_HOT);
            wmrpc__metadata_response__free_unpacked(r, NULL);
        }
    }
    char *metrics = NULL;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
    assert_non_null(strstr(metrics, "weight_migrations_completed_total"));
    assert_non_null(strstr(metrics, "weight_migration_processed_bytes_total"));
    assert_non_null(strstr(metrics, "weight_revisions_by_residency{residency=\"COLD\"} 2\n"));
    free(metrics);
}

/* Every explicit path: HOT -> COLD -> HOT, HOT -> MIXED -> COLD and
 * COLD -> MIXED -> HOT, the replicas following each step. */
static void test_every_explicit_path(void **state)
{
    fixture *f = *state;
    start_lc(f, "wl-paths", 2, NULL);
    int paths[3][3] = {{RS_HOT, RS_COLD, RS_HOT}, {RS_HOT, RS_MIXED, RS_COLD}, {RS_COLD, RS_MIXED, RS_HOT}};
    for (int k = 0; k < 3; k++) {
        Wmrpc__WeightIdentity id;
        char name[32];
        snprintf(name, sizeof(name), "path-%d", k);
        set_identity(&id, "t1", "paths", name, 1);
        upload u = {.n = 6, .sizes = {100, 200, 300, 400, 500, 600}, .per_unit = 2};
        Wmrpc__MetadataResponse *r = publish(f, &id, paths[k][0], MODE_MANUAL, &u);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        r = wait_state(f, &id, AV_READY, paths[k][0]);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        check_replicas(f, &u, paths[k][0]);
        for (int s = 1; s < 3; s++) {
            r = migrate_and_wait(f, &id, paths[k][s]);
            uint64_t hot = check_replicas(f, &u, paths[k][s]);
            if (paths[k][s] == RS_MIXED) {
                /* Units of two payloads: 300, 700, 1100 bytes of 2100;
                 * 1000 and 1100 are equally near 1050: the smaller wins. */
                assert_true(r->metadata->observed_hot_ratio > 0.0 && r->metadata->observed_hot_ratio < 1.0);
                assert_int_equal(hot, 1000);
            }
            wmrpc__metadata_response__free_unpacked(r, NULL);
            assert_int_equal(is_exist(f, &id), 1);
        }
    }
}

/* A lease held across a migration to COLD keeps every memory replica while
 * the cold replicas are created; the operation stays RUNNING and removal is
 * BUSY. Once the lease is released the memory replicas go and the
 * operation completes. */
static void test_lease_blocks_memory_release_during_cold_migration(void **state)
{
    fixture *f = *state;
    start_lc(f, "wl-lease", 2, NULL);
    Wmrpc__WeightIdentity id;
    set_identity(&id, "t1", "lease", "held", 1);
    upload u = {.per_unit = 1};
    sizes_fill(&u, 5, 1000);
    Wmrpc__MetadataResponse *r = publish(f, &id, RS_HOT, MODE_MANUAL, &u);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    uint64_t lease = acquire_lease(f, &id);
    r = NULL;
    assert_int_equal(migrate(f, &id, RS_COLD, generation_of(f, &id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);

    /* Wait until every payload has its cold replica. */
    char key[1200];
    int mem, cold;
    uint64_t end = mono_ms() + WAIT_MS;
    for (size_t i = 0; i < u.n;) {
        payload_key(&u, i, key, sizeof(key));
        replicas(f, key, &mem, &cold);
        if (cold > 0) {
            i++;
            continue;
        }
        if (mono_ms() > end) fail_msg("%s got no cold replica under the lease", key);
        sleep_ms(20);
    }
    sleep_ms(500); /* several more rounds */
    for (size_t i = 0; i < u.n; i++) {
        payload_key(&u, i, key, sizeof(key));
        replicas(f, key, &mem, &cold);
        if (mem == 0) fail_msg("%s lost its memory replica while a lease is held", key);
    }
    int st;
    Wmrpc__OperationResponse *op = get_op(f, op_id, &st);
    assert_int_equal(op->operation->state, 1);
    wmrpc__operation_response__free_unpacked(op, NULL);
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, generation_of(f, &id), NULL),
                     E_BUSY);

    release_lease(f, &id, lease);
    op = wait_op(f, op_id);
    assert_int_equal(op->operation->state, 2);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, AV_READY, RS_COLD);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    check_replicas(f, &u, RS_COLD);
}

/* Removal is BUSY while a lease is held; after its release it is accepted
 * and runs to a DELETED + ABSENT tombstone that stays queryable, with the
 * operation SUCCEEDED and nothing left of the group. */
static void test_remove_runs_to_tombstone(void **state)
{
    fixture *f = *state;
    start_lc(f, "wl-remove", 2, NULL);
    Wmrpc__WeightIdentity id;
    set_identity(&id, "t1", "rm", "gone", 1);
    upload u = {.per_unit = 1};
    sizes_fill(&u, 7, 500);
    Wmrpc__MetadataResponse *r = publish(f, &id, RS_HOT, MODE_AUTO, &u);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    uint64_t lease = acquire_lease(f, &id);
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, generation_of(f, &id), NULL),
                     E_BUSY);
    assert_non_null(strstr(f->last_error, "lease"));
    release_lease(f, &id, lease);
    r = NULL;
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, generation_of(f, &id), &r), 0);
    assert_int_equal(r->metadata->availability, AV_DELETING);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    Wmrpc__OperationResponse *op = wait_op(f, op_id);
    assert_int_equal(op->operation->state, 2);
    assert_int_equal(op->operation->members_done, 8);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, AV_DELETED, RS_ABSENT);
    assert_int_equal(r->metadata->active_leases, 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(is_exist(f, &id), 0);
    char **keys = NULL;
    size_t n = 0;
    char *next = NULL;
    assert_int_equal(kvc_list(f->kv, u.group, NULL, 100, &keys, &n, &next), 0);
    assert_int_equal(n, 0);
    kvc_list_free(keys, n, next);
    int mem, cold;
    replicas(f, u.manifest, &mem, &cold);
    assert_int_equal(mem, -1);
}

/* A cold write that fails (a directory sits where the node must rename the
 * verified cold file of payload 1) leaves the READY revision readable and
 * the operation RUNNING with the error and growing attempts; once the
 * obstacle is gone the operation completes. */
static void test_cold_write_failure_retries(void **state)
{
    fixture *f = *state;
    start_lc(f, "wl-fail", 2, NULL);
    Wmrpc__WeightIdentity id;
    set_identity(&id, "t1", "fail", "disk", 1);
    upload u = {.per_unit = 1};
    sizes_fill(&u, 3, 700);
    Wmrpc__MetadataResponse *r = publish(f, &id, RS_HOT, MODE_MANUAL, &u);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    /* The bytes of payload 1 as put_some wrote them, and its cold name. */
    char key[1200], name[COLD_NAME_MAX], path[1600], inner[1700];
    unsigned char sha[32];
    unsigned char *data = malloc(u.sizes[1]);
    for (uint64_t b = 0; b < u.sizes[1]; b++) data[b] = (unsigned char)(1 * 31 + b);
    hx_sha256(data, u.sizes[1], sha);
    free(data);
    payload_key(&u, 1, key, sizeof(key));
    assert_int_equal(cold_name_for(key, sha, name), 0);
    snprintf(path, sizeof(path), "%s/cold/%s", f->m.dir, name);
    snprintf(inner, sizeof(inner), "%s/blocker", path);
    assert_int_equal(mkdir(path, 0700), 0);
    FILE *bf = fopen(inner, "w");
    assert_non_null(bf);
    fclose(bf);

    r = NULL;
    assert_int_equal(migrate(f, &id, RS_COLD, generation_of(f, &id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    uint64_t end = mono_ms() + WAIT_MS;
    for (;;) {
        int st;
        Wmrpc__OperationResponse *op = get_op(f, op_id, &st);
        assert_int_equal(st, 0);
        int enough = op->operation->attempts > 1 && op->operation->error && op->operation->error[0];
        if (enough) {
            assert_int_equal(op->operation->state, 1);
            assert_non_null(strstr(op->operation->error, "cold replica"));
        }
        wmrpc__operation_response__free_unpacked(op, NULL);
        if (enough) break;
        if (mono_ms() > end) fail_msg("the failing cold write was not retried");
        sleep_ms(20);
    }
    Wmrpc__MetadataResponse *md = get_md(f, &id);
    assert_int_equal(md->metadata->availability, AV_READY);
    assert_int_equal(md->metadata->operation_id, op_id);
    wmrpc__metadata_response__free_unpacked(md, NULL);
    assert_int_equal(is_exist(f, &id), 1);
    int mem, cold;
    replicas(f, key, &mem, &cold);
    assert_true(mem > 0);
    char *metrics = NULL;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
    assert_null(strstr(metrics, "weight_operation_failures_total 0\n"));
    free(metrics);

    assert_int_equal(unlink(inner), 0);
    assert_int_equal(rmdir(path), 0);
    Wmrpc__OperationResponse *op = wait_op(f, op_id);
    assert_int_equal(op->operation->state, 2);
    assert_true(op->operation->attempts > 1);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, AV_READY, RS_COLD);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    check_replicas(f, &u, RS_COLD);
}

/* Two store_node processes: killing the node that holds a payload makes the
 * READY revision DEGRADED (not is_exist); restarting it on its segment makes
 * the revision READY again. */
static void test_killed_node_degrades_then_recovers(void **state)
{
    fixture *f = *state;
    char cfg[1024];
    assert_int_equal(hx_init(&f->m, "wl-node", NULL), 0);
    snprintf(cfg, sizeof(cfg),
             "node:\n  embedded: false\n  timeout_ms: 600\n  poll_ms: 50\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n",
             BUILD_DIR);
    assert_int_equal(hx_reconfigure(&f->m, cfg), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    hx_node a, b;
    assert_int_equal(hx_node_start(&f->m, &a, "node-a", 16u << 20), 0);
    assert_int_equal(hx_node_start(&f->m, &b, "node-b", 16u << 20), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    connect_clients(f);

    Wmrpc__WeightIdentity id;
    set_identity(&id, "t1", "node", "lost", 1);
    upload u = {.per_unit = 1};
    sizes_fill(&u, 6, 1000);
    Wmrpc__MetadataResponse *r = publish(f, &id, RS_HOT, MODE_MANUAL, &u);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(is_exist(f, &id), 1);

    /* Kill the node holding payload 0. */
    char key[1200];
    kvc_object o;
    payload_key(&u, 0, key, sizeof(key));
    assert_int_equal(kvc_get(f->kv, key, &o), 0);
    hx_node *victim = strcmp(o.replicas[0].node, "node-a") == 0 ? &a : &b;
    hx_node_kill(victim);
    r = wait_state(f, &id, AV_DEGRADED, -1);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(is_exist(f, &id), 0);

    assert_int_equal(hx_node_start(&f->m, victim, victim == &a ? "node-a" : "node-b", 16u << 20), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    r = wait_state(f, &id, AV_READY, RS_HOT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(is_exist(f, &id), 1);
    disconnect_clients(f);
    hx_node_kill(&a);
    hx_node_kill(&b);
}

/* Poll the operation until members_done reaches at least `at`; returns it. */
static uint64_t wait_progress(fixture *f, uint64_t op_id, uint64_t at)
{
    uint64_t end = mono_ms() + WAIT_MS;
    for (;;) {
        int st;
        Wmrpc__OperationResponse *op = get_op(f, op_id, &st);
        assert_int_equal(st, 0);
        uint64_t done = op->operation->members_done;
        int running = op->operation->state == 1;
        wmrpc__operation_response__free_unpacked(op, NULL);
        if (!running) fail_msg("operation %llu ended before the kill", (unsigned long long)op_id);
        if (done >= at) return done;
        if (mono_ms() > end) fail_msg("operation %llu made no progress", (unsigned long long)op_id);
        sleep_ms(5);
    }
}

static void restart_master(fixture *f)
{
    disconnect_clients(f);
    hx_kill(&f->m);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    connect_clients(f);
}

/* SIGKILL of the master in the middle of a migration to COLD and then of a
 * deletion: after the restart the same operation (same id, progress not
 * below what was persisted) resumes from its cursor and completes. */
static void test_master_killed_mid_migration_and_deletion(void **state)
{
    fixture *f = *state;
    start_lc(f, "wl-kill", 2, NULL);
    Wmrpc__WeightIdentity id;
    set_identity(&id, "t1", "kill", "big", 1);
    upload u = {.per_unit = 1};
    sizes_fill(&u, 60, 256);
    Wmrpc__MetadataResponse *r = publish(f, &id, RS_HOT, MODE_MANUAL, &u);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    r = NULL;
    assert_int_equal(migrate(f, &id, RS_COLD, generation_of(f, &id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    uint64_t before = wait_progress(f, op_id, 4);
    restart_master(f);
    int st;
    Wmrpc__OperationResponse *op = get_op(f, op_id, &st);
    assert_int_equal(st, 0);
    assert_true(op->operation->members_done >= before);
    assert_true(op->operation->members_done < op->operation->members_total ||
                op->operation->state == 2);
    wmrpc__operation_response__free_unpacked(op, NULL);
    op = wait_op(f, op_id);
    assert_int_equal(op->operation->state, 2);
    assert_int_equal(op->operation->members_done, 60);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, AV_READY, RS_COLD);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    /* (No kvc_get here: its per-object read leases would hold the
     * removal below back until they expire.) */
    assert_int_equal(is_exist(f, &id), 1);

    r = NULL;
    int rs = E_BUSY;
    for (int i = 0; i < 200 && rs == E_BUSY; i++) {
        rs = ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, generation_of(f, &id), &r);
        if (rs == E_BUSY) sleep_ms(20);
    }
    assert_int_equal(rs, 0);
    op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    before = wait_progress(f, op_id, 4);
    restart_master(f);
    op = get_op(f, op_id, &st);
    assert_int_equal(st, 0);
    assert_true(op->operation->members_done >= before);
    wmrpc__operation_response__free_unpacked(op, NULL);
    op = wait_op(f, op_id);
    assert_int_equal(op->operation->state, 2);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, AV_DELETED, RS_ABSENT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    char **keys = NULL;
    size_t n = 0;
    char *next = NULL;
    assert_int_equal(kvc_list(f->kv, u.group, NULL, 100, &keys, &n, &next), 0);
    assert_int_equal(n, 0);
    kvc_list_free(keys, n, next);
}

/* SIGKILL during an import (payloads uploaded, no commit): after the
 * restart the revision is still IMPORTING -- never READY, not listed, not
 * readable; aborting it removes its uploads and leaves a tombstone. */
static void test_master_killed_during_import_never_publishes(void **state)
{
    fixture *f = *state;
    start_lc(f, "wl-import", 2, NULL);
    Wmrpc__WeightIdentity id;
    set_identity(&id, "t1", "imp", "partial", 1);
    Wmrpc__WeightMetadata *md = NULL;
    assert_int_equal(begin(f, &id, RS_COLD, 0.5, MODE_AUTO, &md), 0);
    upload u = {.per_unit = 1};
    sizes_fill(&u, 5, 300);
    put_some(f, &u, md, 3, -1); /* payload 3 never uploaded */
    wmrpc__weight_metadata__free_unpacked(md, NULL);
    restart_master(f);
    Wmrpc__MetadataResponse *r = get_md(f, &id);
    assert_int_equal(r->metadata->availability, AV_IMPORTING);
    uint64_t gen = r->metadata->metadata_generation;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(is_exist(f, &id), 0);
    sleep_ms(300); /* the tick never publishes it */
    r = get_md(f, &id);
    assert_int_equal(r->metadata->availability, AV_IMPORTING);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    r = NULL;
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, &id, gen, &r), 0);
    assert_int_equal(r->metadata->availability, AV_DELETING);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    r = wait_state(f, &id, AV_DELETED, RS_ABSENT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    char **keys = NULL;
    size_t n = 0;
    char *next = NULL;
    assert_int_equal(kvc_list(f->kv, u.group, NULL, 100, &keys, &n, &next), 0);
    assert_int_equal(n, 0);
    kvc_list_free(keys, n, next);
}

/* AUTO under real memory pressure (1 MiB segment, high watermark 0.5): the
 * AUTO revision is demoted (first to MIXED) by the tick without any client
 * call, the trigger is counted in /metrics; the MANUAL revision beside it
 * stays HOT. */
static void test_auto_demotes_under_memory_pressure(void **state)
{
    fixture *f = *state;
    char cfg[2048];
    assert_int_equal(hx_init(&f->m, "wl-auto", NULL), 0);
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: 1048576\n"
             "  cold_dir: \"%s/cold\"\n  poll_ms: 10\n"
             "memory:\n  high_watermark: 0.5\n  low_watermark: 0.2\n"
             "cluster:\n  weight_migration_cooldown_ms: 100\n"
             "  weight_migration_max_members_per_round: 2\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n",
             f->m.dir, f->m.dir, BUILD_DIR);
    assert_int_equal(hx_reconfigure(&f->m, cfg), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    connect_clients(f);

    Wmrpc__WeightIdentity man, aut;
    set_identity(&man, "t1", "auto", "manual", 1);
    set_identity(&aut, "t1", "auto", "auto", 1);
    upload um = {.n = 2, .sizes = {100000, 100000}, .per_unit = 1};
    upload ua = {.n = 4, .sizes = {100000, 100000, 100000, 100000}, .per_unit = 1};
    Wmrpc__MetadataResponse *r = publish(f, &man, RS_HOT, MODE_MANUAL, &um);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    r = publish(f, &aut, RS_HOT, MODE_AUTO, &ua);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    uint64_t end = mono_ms() + WAIT_MS;
    for (;;) {
        Wmrpc__MetadataResponse *md = get_md(f, &aut);
        int demoted = md->metadata->residency != RS_HOT && md->metadata->operation_id == 0;
        wmrpc__metadata_response__free_unpacked(md, NULL);
        if (demoted) break;
        if (mono_ms() > end) fail_msg("the AUTO revision was not demoted under memory pressure");
        sleep_ms(20);
    }
    r = get_md(f, &man);
    assert_int_equal(r->metadata->residency, RS_HOT);
    assert_int_equal(r->metadata->operation_id, 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    check_replicas(f, &um, RS_HOT);
    check_replicas(f, &ua, RS_MIXED);
    char *metrics = NULL;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
    if (strstr(metrics, "weight_auto_migrations_total{direction=\"demote\",reason=\"memory_pressure\"} 0\n") ||
        !strstr(metrics, "weight_auto_migrations_total{direction=\"demote\",reason=\"memory_pressure\"}"))
        fail_msg("no AUTO demotion counted:\n%s", metrics);
    free(metrics);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    *state = f;
    return f ? 0 : -1;
}

static int teardown(void **state)
{
    fixture *f = *state;
    disconnect_clients(f);
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_converges_to_preferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_explicit_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_blocks_memory_release_during_cold_migration, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_remove_runs_to_tombstone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cold_write_failure_retries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_node_degrades_then_recovers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_master_killed_mid_migration_and_deletion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_master_killed_during_import_never_publishes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_demotes_under_memory_pressure, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
