/* test_weight_publish.c -- publishing, querying, leasing and removing weight
 * revisions on a real master with the real weight_mgmt.so.
 *
 * Payloads (WEIGHT) and the manifest (METADATA) travel through the node data
 * path with kv_client into the group IMPORT_BEGIN names; every weight call is
 * a raw service-16 RPC, so the wire contract of proto/weight_rpc.proto is
 * what is pinned: statuses (WM_E* / SMP_E*), the error sentence in the reply
 * body, and the messages. The digests the commit carries are computed here
 * from their definition (sorted payload keys, affinity lines), independently
 * of the plugin's code. */
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

#include "harness.h"
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

static void start(fixture *f, const char *name, const char *extra)
{
    assert_int_equal(hx_init(&f->m, name, extra), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    connect_clients(f);
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
    uint64_t sizes[16];
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

static int update_policy(fixture *f, const Wmrpc__WeightIdentity *id, int preferred, int mode,
                         uint64_t expected, Wmrpc__MetadataResponse **out)
{
    Wmrpc__UpdatePolicyRequest req = WMRPC__UPDATE_POLICY_REQUEST__INIT;
    Wmrpc__WeightPolicy pol = WMRPC__WEIGHT_POLICY__INIT;
    pol.preferred_residency = (uint32_t)preferred;
    pol.migration_mode = (uint32_t)mode;
    req.identity = (Wmrpc__WeightIdentity *)id;
    req.policy = &pol;
    req.expected_metadata_generation = expected;
    uint8_t *body = NULL;
    size_t len = 0;
    int st = call(f, WMRPC__WEIGHT_METHOD__WEIGHT_UPDATE_POLICY, &req.base, &body, &len);
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

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

/* A HOT revision is published READY + HOT with no operation; its metadata,
 * size and existence answer; retries of begin (CONFLICT once READY) and of
 * commit (the same result, no operation) change nothing; a payload put into
 * its group after READY is refused by the guard and counted. */
static void test_publish_hot_revision(void **state)
{
    fixture *f = *state;
    start(f, "wp-hot", NULL);
    Wmrpc__WeightIdentity id;
    set_identity(&id, "t1", "llm", "llama", 1);
    upload u = {.n = 3, .sizes = {1000, 2000, 3000}, .per_unit = 2};

    Wmrpc__WeightMetadata *md = NULL;
    assert_int_equal(begin(f, &id, RS_HOT, 0, MODE_MANUAL, &md), 0);
    assert_int_equal(md->availability, AV_IMPORTING);
    assert_int_equal(md->residency, RS_UNKNOWN);
    assert_int_equal(md->metadata_generation, 1);
    assert_string_equal(md->group_key, "weights/t1/llm/llama/main/1");
    assert_string_equal(md->manifest_key, "weights/t1/llm/llama/main/1/manifest");
    assert_int_equal(is_exist(f, &id), 0); /* IMPORTING is not readable */

    /* A retried begin while IMPORTING answers the same revision. */
    Wmrpc__WeightMetadata *again = NULL;
    assert_int_equal(begin(f, &id, RS_HOT, 0, MODE_MANUAL, &again), 0);
    assert_string_equal(again->group_key, md->group_key);
    assert_int_equal(again->metadata_generation, 1);
    wmrpc__weight_metadata__free_unpacked(again, NULL);

    put_all(f, &u, md);
    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(commit(f, &id, 1, &u, NULL, &r), 0);
    assert_int_equal(r->metadata->availability, AV_READY);
    assert_int_equal(r->metadata->residency, RS_HOT);
    assert_int_equal(r->metadata->metadata_generation, 2);
    assert_int_equal(r->metadata->operation_id, 0);
    assert_null(r->operation);
    assert_int_equal(r->metadata->payload_count, 3);
    assert_int_equal(r->metadata->logical_bytes, 6000);
    assert_int_equal(r->metadata->affinity_count, 2);
    assert_memory_equal(r->metadata->manifest_sha256.data, u.manifest_sha, 32);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    assert_int_equal(is_exist(f, &id), 1);
    Wmrpc__IdentityRequest sreq = WMRPC__IDENTITY_REQUEST__INIT;
    sreq.identity = &id;
    uint8_t *body = NULL;
    size_t len = 0;
    assert_int_equal(call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_SIZE, &sreq.base, &body, &len), 0);
    Wmrpc__SizeResponse *sz = wmrpc__size_response__unpack(NULL, len, body);
    assert_int_equal(sz->logical_bytes, 6000);
    wmrpc__size_response__free_unpacked(sz, NULL);
    free(body);

    /* Retried commit: the committed result, same generation, no operation. */
    r = NULL;
    assert_int_equal(commit(f, &id, 1, &u, NULL, &r), 0);
    assert_int_equal(r->metadata->metadata_generation, 2);
    assert_int_equal(r->metadata->operation_id, 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    /* Retried begin once READY: CONFLICT naming the state. */
    assert_int_equal(begin(f, &id, RS_HOT, 0, MODE_MANUAL, NULL), E_CONFLICT);
    assert_non_null(strstr(f->last_error, "READY"));

    /* The group is sealed: no new payload, no overwrite. */
    char key[1200];
    snprintf(key, sizeof(key), "%s/payload/3", u.group);
    assert_int_equal(kvc_put_bytes(f->kv, key, "x", 1, SMP_DATA_WEIGHT, u.group, 0, NULL), SMP_EVETO);
    snprintf(key, sizeof(key), "%s/payload/0", u.group);
    assert_int_equal(kvc_put_bytes(f->kv, key, "x", 1, SMP_DATA_WEIGHT, u.group, 1, NULL), SMP_EVETO);
    assert_int_equal(kvc_remove(f->kv, key), SMP_EVETO);
    /* The guard's count reaches /metrics with the next tick (the guard may
     * not call the host itself). */
    char *metrics = NULL;
    int seen = 0;
    for (int i = 0; i < 100 && !seen; i++) {
        free(metrics);
        metrics = NULL;
        assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
        seen = strstr(metrics, "weight_guard_skips_total{reason=\"put_into_group\"} 1\n") != NULL;
        if (!seen) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    if (!seen) fail_msg("no guard skip in /metrics:\n%s", metrics);
    assert_non_null(strstr(metrics, "weight_guard_skips_total{reason=\"upsert_into_group\"} 1\n"));
    assert_non_null(strstr(metrics, "weight_guard_skips_total{reason=\"remove_key\"} 1\n"));
    assert_non_null(strstr(metrics, "weight_revisions{availability=\"READY\"} 1\n"));
    free(metrics);

    /* Unknown revision: NOT_FOUND naming it. */
    Wmrpc__WeightIdentity other;
    set_identity(&other, "t1", "llm", "llama", 7);
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &other, 0, NULL),
                     E_NOT_FOUND);
    assert_non_null(strstr(f->last_error, "llama"));
    wmrpc__weight_metadata__free_unpacked(md, NULL);
}

/* COLD and MIXED revisions are published READY + HOT too, with the initial
 * MIGRATING operation toward the preferred residency in the same record; a
 * retried commit answers the same operation; the operation is queryable;
 * is_exist stays true while it runs. */
static void test_publish_cold_and_mixed_start_migration(void **state)
{
    fixture *f = *state;
    start(f, "wp-cold", NULL);
    int prefs[2] = {RS_COLD, RS_MIXED};
    for (int k = 0; k < 2; k++) {
        Wmrpc__WeightIdentity id;
        set_identity(&id, "t1", "llm", k ? "mixed" : "cold", 1);
        upload u = {.n = 4, .sizes = {100, 200, 300, 400}, .per_unit = 1};
        Wmrpc__MetadataResponse *r = publish(f, &id, prefs[k], MODE_AUTO, &u);
        assert_int_equal(r->metadata->availability, AV_READY);
        assert_int_equal(r->metadata->residency, RS_HOT);
        assert_true(r->metadata->operation_id > 0);
        assert_non_null(r->operation);
        assert_int_equal(r->operation->id, r->metadata->operation_id);
        assert_int_equal(r->operation->kind, OPK_MIGRATING);
        assert_int_equal(r->operation->target_residency, prefs[k]);
        assert_int_equal(r->operation->state, 1);
        if (prefs[k] == RS_MIXED) assert_true(r->operation->target_hot_ratio == 0.5);
        uint64_t op_id = r->operation->id;
        wmrpc__metadata_response__free_unpacked(r, NULL);

        Wmrpc__MetadataResponse *again = NULL;
        assert_int_equal(commit(f, &id, 1, &u, NULL, &again), 0);
        assert_int_equal(again->metadata->operation_id, op_id);
        assert_int_equal(again->metadata->metadata_generation, 2);
        wmrpc__metadata_response__free_unpacked(again, NULL);

        int st;
        Wmrpc__OperationResponse *op = get_op(f, op_id, &st);
        assert_int_equal(st, 0);
        assert_int_equal(op->operation->target_residency, prefs[k]);
        wmrpc__operation_response__free_unpacked(op, NULL);
        assert_int_equal(is_exist(f, &id), 1);

        /* One active operation: an explicit migration is BUSY meanwhile. */
        assert_int_equal(migrate(f, &id, RS_HOT, 2, NULL), E_BUSY);
    }
    int st;
    assert_null(get_op(f, 999, &st));
    assert_int_equal(st, E_NOT_FOUND);
}

/* A commit that disagrees with the group in any way is INVALID_ARGUMENT
 * naming what, and the revision stays IMPORTING; the truthful commit then
 * publishes. */
static void test_commit_refuses_mismatches(void **state)
{
    fixture *f = *state;
    start(f, "wp-bad", NULL);
    Wmrpc__WeightIdentity id;
    set_identity(&id, "", "llm", "bad", 3);
    upload u = {.n = 3, .sizes = {10, 20, 30}, .per_unit = 1};
    Wmrpc__WeightMetadata *md = NULL;
    assert_int_equal(begin(f, &id, RS_HOT, 0, MODE_AUTO, &md), 0);
    assert_string_equal(md->group_key, "weights/default/llm/bad/main/3");

    /* Before the manifest is there: the group has too few objects. */
    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(commit(f, &id, 1, &u, NULL, NULL), E_INVALID_ARGUMENT);
    put_all(f, &u, md);

    struct {
        lies l;
        const char *needle;
    } cases[] = {
        {{.count_delta = 1}, "objects"},
        {{.count_delta = -1}, "objects"},
        {{.bytes_delta = 1}, "logical bytes"},
        {{.bad_keys_digest = 1}, "payload_keys_sha256"},
        {{.bad_manifest_sha = 1}, "SHA-256"},
        {{.bad_affinity_digest = 1}, "affinity"},
        {{.bad_unit_bytes = 1}, "affinity unit 0"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int st = commit(f, &id, 1, &u, &cases[i].l, NULL);
        if (st != E_INVALID_ARGUMENT || strstr(f->last_error, cases[i].needle) == NULL)
            fail_msg("case %zu: status %d, message \"%s\" (wanted \"%s\")", i, st, f->last_error,
                     cases[i].needle);
        r = get_md(f, &id);
        assert_int_equal(r->metadata->availability, AV_IMPORTING);
        assert_int_equal(r->metadata->metadata_generation, 1);
        wmrpc__metadata_response__free_unpacked(r, NULL);
    }
    /* A stale generation is refused before anything else. */
    assert_int_equal(commit(f, &id, 5, &u, NULL, NULL), E_STALE_GENERATION);
    r = NULL;
    assert_int_equal(commit(f, &id, 1, &u, NULL, &r), 0);
    assert_int_equal(r->metadata->availability, AV_READY);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    wmrpc__weight_metadata__free_unpacked(md, NULL);

    /* Payload 1 missing and payload 3 there instead: the right count of
     * objects, but an extra one. */
    Wmrpc__WeightIdentity id2;
    set_identity(&id2, "", "llm", "gap", 1);
    md = NULL;
    assert_int_equal(begin(f, &id2, RS_HOT, 0, MODE_AUTO, &md), 0);
    upload g = {.n = 3, .sizes = {10, 20, 30}, .per_unit = 1};
    put_some(f, &g, md, 1, 3);
    assert_int_equal(commit(f, &id2, 1, &g, NULL, NULL), E_INVALID_ARGUMENT);
    assert_non_null(strstr(f->last_error, "extra object"));
    assert_non_null(strstr(f->last_error, "payload/3"));
    r = get_md(f, &id2);
    assert_int_equal(r->metadata->availability, AV_IMPORTING);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    /* An object outside the revision's keys is refused at put time. */
    assert_int_equal(kvc_put_bytes(f->kv, "stray", "x", 1, SMP_DATA_WEIGHT, g.group, 0, NULL),
                     SMP_EVETO);
    wmrpc__weight_metadata__free_unpacked(md, NULL);

    /* Bad identity and policy at begin. */
    Wmrpc__WeightIdentity bad;
    set_identity(&bad, "t", "", "x", 1);
    assert_int_equal(begin(f, &bad, RS_HOT, 0, MODE_AUTO, NULL), E_INVALID_ARGUMENT);
    assert_non_null(strstr(f->last_error, "identity"));
    set_identity(&bad, "t", "n", "x", 1);
    assert_int_equal(begin(f, &bad, RS_MIXED, 1.5, MODE_AUTO, NULL), E_INVALID_ARGUMENT);
    assert_non_null(strstr(f->last_error, "policy"));
    assert_int_equal(begin(f, &bad, 9, 0, MODE_AUTO, NULL), E_INVALID_ARGUMENT);
}

/* LIST pages through a tenant in identity order with a stable token, filters
 * by namespace and resource, hides IMPORTING revisions and shows tombstones
 * only when asked. */
static void test_list_pagination_and_filters(void **state)
{
    fixture *f = *state;
    start(f, "wp-list", NULL);
    const char *res[] = {"a", "b", "c", "d", "e"};
    for (int i = 0; i < 5; i++) {
        Wmrpc__WeightIdentity id;
        set_identity(&id, "t", i < 3 ? "ns1" : "ns2", res[i], 1);
        upload u = {.n = 1, .sizes = {64}, .per_unit = 1};
        wmrpc__metadata_response__free_unpacked(publish(f, &id, RS_HOT, MODE_AUTO, &u), NULL);
    }
    Wmrpc__WeightIdentity other, imp, gone;
    set_identity(&other, "u", "ns1", "a", 1);
    upload u = {.n = 1, .sizes = {64}, .per_unit = 1};
    wmrpc__metadata_response__free_unpacked(publish(f, &other, RS_HOT, MODE_AUTO, &u), NULL);
    set_identity(&imp, "t", "ns1", "zz-importing", 1);
    assert_int_equal(begin(f, &imp, RS_HOT, 0, MODE_AUTO, NULL), 0);
    set_identity(&gone, "t", "ns1", "b", 2);
    assert_int_equal(begin(f, &gone, RS_HOT, 0, MODE_AUTO, NULL), 0);
    Wmrpc__MetadataResponse *ab = NULL;
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, &gone, 1, &ab), 0);
    assert_int_equal(ab->metadata->availability, AV_DELETED);
    wmrpc__metadata_response__free_unpacked(ab, NULL);

    struct {
        const char *ns, *res;
        int deleted;
        const char *want;
    } cases[] = {
        {"", "", 0, "ns1/a ns1/b ns1/c ns2/d ns2/e "},
        {"", "", 1, "ns1/a ns1/b ns1/b ns1/c ns2/d ns2/e "},
        {"ns1", "", 0, "ns1/a ns1/b ns1/c "},
        {"ns2", "e", 0, "ns2/e "},
        {"ns3", "", 0, ""},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char got[512] = "", token[1100] = "";
        int pages = 0;
        do {
            Wmrpc__ListRequest req = WMRPC__LIST_REQUEST__INIT;
            req.tenant = (char *)"t";
            req.namespace_id = (char *)cases[c].ns;
            req.resource_id = (char *)cases[c].res;
            req.page_token = token;
            req.limit = 2;
            req.include_deleted = cases[c].deleted;
            uint8_t *body = NULL;
            size_t len = 0;
            assert_int_equal(call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &req.base, &body, &len), 0);
            Wmrpc__ListResponse *lr = wmrpc__list_response__unpack(NULL, len, body);
            assert_non_null(lr);
            assert_true(lr->n_revisions <= 2);
            for (size_t i = 0; i < lr->n_revisions; i++) {
                assert_true(lr->revisions[i]->availability != AV_IMPORTING);
                snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s/%s ",
                         lr->revisions[i]->identity->namespace_id,
                         lr->revisions[i]->identity->resource_id);
            }
            snprintf(token, sizeof(token), "%s", lr->next_page_token);
            wmrpc__list_response__free_unpacked(lr, NULL);
            free(body);
            assert_true(++pages < 10);
        } while (token[0]);
        if (strcmp(got, cases[c].want) != 0)
            fail_msg("case %zu: listed \"%s\", wanted \"%s\"", c, got, cases[c].want);
    }
    Wmrpc__ListRequest bad = WMRPC__LIST_REQUEST__INIT;
    bad.tenant = (char *)"t";
    bad.resource_id = (char *)"a";
    assert_int_equal(call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &bad.base, NULL, NULL),
                     E_INVALID_ARGUMENT);
    bad.resource_id = (char *)"";
    bad.page_token = (char *)"garbage";
    assert_int_equal(call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &bad.base, NULL, NULL),
                     E_INVALID_ARGUMENT);
}

/* Leases: acquire on READY, renew, BUSY on remove while held, remove after
 * release goes DELETING with a DELETING operation; no lease on DELETING;
 * is_exist false from DELETING on; a tombstone (aborted empty import) stays
 * queryable and a remove of it answers it. Policy updates and migrations are
 * CAS-fenced and PINNED refuses migration. */
static void test_leases_remove_and_tombstones(void **state)
{
    fixture *f = *state;
    start(f, "wp-lease", NULL);
    Wmrpc__WeightIdentity id;
    set_identity(&id, "t", "llm", "m", 1);
    upload u = {.n = 2, .sizes = {500, 600}, .per_unit = 2};
    wmrpc__metadata_response__free_unpacked(publish(f, &id, RS_HOT, MODE_MANUAL, &u), NULL);

    Wmrpc__LeaseResponse *lr = NULL;
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &id, 0, 0, &lr), 0);
    assert_non_null(lr->lease);
    uint64_t lease = lr->lease->id;
    uint64_t exp1 = lr->lease->expires_ms;
    assert_int_equal(lr->lease->metadata_generation, 2);
    assert_int_equal(lr->metadata->active_leases, 1);
    wmrpc__lease_response__free_unpacked(lr, NULL);

    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &id, lease, 60000, &lr), 0);
    assert_true(lr->lease->expires_ms > exp1);
    wmrpc__lease_response__free_unpacked(lr, NULL);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &id, 4242, 0, NULL),
                     E_LEASE_EXPIRED);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &id, 0, 3600000, NULL),
                     E_INVALID_ARGUMENT);

    /* CAS: a stale generation cannot overwrite; the current one can. */
    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(update_policy(f, &id, RS_COLD, 0, 1, NULL), E_STALE_GENERATION);
    assert_non_null(strstr(f->last_error, "generation 2"));
    assert_int_equal(update_policy(f, &id, 0, MODE_PINNED, 2, &r), 0);
    assert_int_equal(r->metadata->metadata_generation, 3);
    assert_int_equal(r->metadata->policy->migration_mode, MODE_PINNED);
    assert_int_equal(r->metadata->policy->preferred_residency, RS_HOT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(migrate(f, &id, RS_COLD, 3, NULL), E_POLICY_UNSATISFIABLE);
    assert_non_null(strstr(f->last_error, "PINNED"));

    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, 3, NULL), E_BUSY);
    assert_non_null(strstr(f->last_error, "lease"));
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, &id, lease, 0, NULL), 0);
    /* Releasing again is harmless. */
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, &id, lease, 0, NULL), 0);
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, 2, NULL), E_STALE_GENERATION);
    r = NULL;
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, 3, &r), 0);
    assert_int_equal(r->metadata->availability, AV_DELETING);
    assert_non_null(r->operation);
    assert_int_equal(r->operation->kind, OPK_DELETING);
    uint64_t del_op = r->operation->id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    /* A retried remove answers the same deletion. */
    r = NULL;
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, 3, &r), 0);
    assert_int_equal(r->metadata->operation_id, del_op);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(is_exist(f, &id), 0);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &id, 0, 0, NULL),
                     E_NOT_READY);
    Wmrpc__IdentityRequest sreq = WMRPC__IDENTITY_REQUEST__INIT;
    sreq.identity = &id;
    assert_int_equal(call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_SIZE, &sreq.base, NULL, NULL), E_NOT_READY);

    /* A tombstone: an import aborted before any upload. */
    Wmrpc__WeightIdentity t;
    set_identity(&t, "t", "llm", "tomb", 1);
    assert_int_equal(begin(f, &t, RS_HOT, 0, MODE_AUTO, NULL), 0);
    r = NULL;
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, &t, 1, &r), 0);
    assert_int_equal(r->metadata->availability, AV_DELETED);
    assert_int_equal(r->metadata->residency, RS_ABSENT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    r = get_md(f, &t);
    assert_int_equal(r->metadata->availability, AV_DELETED);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(is_exist(f, &t), 0);
    r = NULL;
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &t, 1, &r), 0);
    assert_int_equal(r->metadata->availability, AV_DELETED);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(begin(f, &t, RS_HOT, 0, MODE_AUTO, NULL), E_CONFLICT);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &t, 0, 0, NULL),
                     E_NOT_READY);

    /* A short lease expires by the tick and can no longer be renewed. */
    Wmrpc__WeightIdentity s;
    set_identity(&s, "t", "llm", "short", 1);
    upload su = {.n = 1, .sizes = {64}, .per_unit = 1};
    wmrpc__metadata_response__free_unpacked(publish(f, &s, RS_HOT, MODE_AUTO, &su), NULL);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &s, 0, 50, &lr), 0);
    uint64_t short_lease = lr->lease->id;
    wmrpc__lease_response__free_unpacked(lr, NULL);
    int gone = 0;
    for (int i = 0; i < 300 && !gone; i++) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
        r = get_md(f, &s);
        gone = r->metadata->active_leases == 0;
        wmrpc__metadata_response__free_unpacked(r, NULL);
    }
    assert_true(gone);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &s, short_lease, 0, NULL),
                     E_LEASE_EXPIRED);
    r = get_md(f, &s);
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &s, r->metadata->metadata_generation,
                                NULL),
                     0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
}

/* The state of one revision as a comparable line. */
static void describe(fixture *f, const Wmrpc__WeightIdentity *id, char *out, size_t cap)
{
    Wmrpc__MetadataResponse *r = get_md(f, id);
    snprintf(out, cap, "av=%u res=%u gen=%llu op=%llu leases=%u bytes=%llu opstate=%u",
             r->metadata->availability, r->metadata->residency,
             (unsigned long long)r->metadata->metadata_generation,
             (unsigned long long)r->metadata->operation_id, r->metadata->active_leases,
             (unsigned long long)r->metadata->logical_bytes, r->operation ? r->operation->state : 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
}

/* Every acknowledged state survives a clean restart (replay), a snapshot
 * followed by more changes and a SIGKILL (snapshot + replay): revisions in
 * every state, operations, leases and tombstones; ids keep growing. */
static void test_restart_keeps_acknowledged_state(void **state)
{
    fixture *f = *state;
    start(f, "wp-restart", NULL);
    Wmrpc__WeightIdentity ids[5];
    set_identity(&ids[0], "t", "llm", "hot", 1);
    set_identity(&ids[1], "t", "llm", "cold", 1);
    set_identity(&ids[2], "t", "llm", "importing", 1);
    set_identity(&ids[3], "t", "llm", "tomb", 1);
    set_identity(&ids[4], "t", "llm", "deleting", 1);
    upload u0 = {.n = 2, .sizes = {100, 200}, .per_unit = 1};
    upload u1 = {.n = 3, .sizes = {100, 200, 300}, .per_unit = 1};
    upload u4 = {.n = 1, .sizes = {100}, .per_unit = 1};
    wmrpc__metadata_response__free_unpacked(publish(f, &ids[0], RS_HOT, MODE_AUTO, &u0), NULL);
    wmrpc__metadata_response__free_unpacked(publish(f, &ids[1], RS_COLD, MODE_AUTO, &u1), NULL);
    assert_int_equal(begin(f, &ids[2], RS_HOT, 0, MODE_AUTO, NULL), 0);
    assert_int_equal(begin(f, &ids[3], RS_HOT, 0, MODE_AUTO, NULL), 0);
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, &ids[3], 1, NULL), 0);
    wmrpc__metadata_response__free_unpacked(publish(f, &ids[4], RS_HOT, MODE_AUTO, &u4), NULL);
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &ids[4], 2, NULL), 0);
    Wmrpc__LeaseResponse *lr = NULL;
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &ids[0], 0, 300000, &lr), 0);
    uint64_t lease = lr->lease->id;
    wmrpc__lease_response__free_unpacked(lr, NULL);

    char before[5][256], after[256];
    for (int i = 0; i < 5; i++) describe(f, &ids[i], before[i], sizeof(before[i]));

    for (int round = 0; round < 3; round++) {
        disconnect_clients(f);
        if (round == 0) {
            assert_int_equal(hx_stop(&f->m), 0);
        } else {
            hx_kill(&f->m);
        }
        assert_int_equal(hx_start(&f->m, 10000), 0);
        connect_clients(f);
        for (int i = 0; i < 5; i++) {
            describe(f, &ids[i], after, sizeof(after));
            if (strcmp(before[i], after) != 0)
                fail_msg("round %d revision %d: before \"%s\", after \"%s\"", round, i, before[i], after);
        }
        /* The lease is still held: renewable, and remove is BUSY. */
        assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &ids[0], lease, 300000, NULL), 0);
        assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &ids[0], 2, NULL), E_BUSY);
        /* The importing revision still takes uploads and commits. */
        if (round == 0) {
            assert_int_equal(kvc_snapshot(f->kv, NULL), 0);
            Wmrpc__MetadataResponse *imp = get_md(f, &ids[2]);
            upload u2 = {.n = 1, .sizes = {77}, .per_unit = 1};
            put_all(f, &u2, imp->metadata);
            wmrpc__metadata_response__free_unpacked(imp, NULL);
            Wmrpc__MetadataResponse *r = NULL;
            assert_int_equal(commit(f, &ids[2], 1, &u2, NULL, &r), 0);
            assert_int_equal(r->metadata->availability, AV_READY);
            wmrpc__metadata_response__free_unpacked(r, NULL);
            describe(f, &ids[2], before[2], sizeof(before[2]));
        }
        if (round == 1) assert_int_equal(kvc_snapshot(f->kv, NULL), 0);
    }
    /* New ids are above every id handed out before the restarts. */
    Wmrpc__MetadataResponse *r = get_md(f, &ids[1]);
    uint64_t old_op = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    r = NULL;
    assert_int_equal(migrate(f, &ids[2], RS_COLD, 2, &r), 0);
    assert_true(r->metadata->operation_id > old_op);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &ids[0], 0, 0, &lr), 0);
    assert_true(lr->lease->id > lease);
    wmrpc__lease_response__free_unpacked(lr, NULL);
}

/* In HA mode weight mutations fail closed until the capability flag is
 * confirmed (SMP_EGATE naming it); reads keep working; with the flag on the
 * same mutation succeeds. */
static void test_ha_gate_fails_mutations_closed(void **state)
{
    fixture *f = *state;
    start(f, "wp-gate", "ha:\n  enabled: true\n");
    Wmrpc__WeightIdentity id;
    set_identity(&id, "t", "llm", "gated", 1);
    assert_int_equal(begin(f, &id, RS_HOT, 0, MODE_AUTO, NULL), SMP_EGATE);
    assert_non_null(strstr(f->last_error, "weight_management_oplog_capability_confirmed"));
    assert_int_equal(ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &id, 0, NULL), E_NOT_FOUND);
    Wmrpc__ListRequest lreq = WMRPC__LIST_REQUEST__INIT;
    assert_int_equal(call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &lreq.base, NULL, NULL), 0);
    /* Plain KV keeps working. */
    assert_int_equal(kvc_put_bytes(f->kv, "kv/one", "abc", 3, SMP_DATA_KV, NULL, 0, NULL), 0);

    disconnect_clients(f);
    assert_int_equal(hx_stop(&f->m), 0);
    assert_int_equal(hx_reconfigure(&f->m, "ha:\n  enabled: true\ncluster:\n"
                                           "  weight_management_oplog_capability_confirmed: true\n"),
                     0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    connect_clients(f);
    assert_int_equal(begin(f, &id, RS_HOT, 0, MODE_AUTO, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_hot_revision, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_cold_and_mixed_start_migration, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commit_refuses_mismatches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_pagination_and_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leases_remove_and_tombstones, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_keeps_acknowledged_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_gate_fails_mutations_closed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
