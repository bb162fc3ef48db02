/* weight_rpc.c -- the weight plugin's RPC service (16) for the integration
 * tests: the fixture (master, rpc and kv clients), one call per weight
 * method over rpcc_call_msg, the uploads of a revision's payloads and
 * manifest, and IMPORT_COMMIT with digests computed here from their
 * definition. See weight_rpc.h for each helper's contract. Failures of the
 * machinery (transport, decoding, a required step refused) fail the running
 * cmocka test; statuses the server answers are returned. */
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

#include "weight_rpc.h"
#include "weightclient.h"
#include "weightclient.h"

int wr_setup(void **state)
{
    wr_fixture *f = calloc(1, sizeof(*f));
    *state = f;
    return f ? 0 : -1;
}

int wr_teardown(void **state)
{
    wr_fixture *f = *state;
    wr_disconnect(f);
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

void wr_connect(wr_fixture *f)
{
    char err[256];
    assert_int_equal(rpcc_connect(f->m.socket, NULL, &f->rpc, err, sizeof(err)), 0);
    f->kv = hx_client(&f->m);
    assert_non_null(f->kv);
}

void wr_disconnect(wr_fixture *f)
{
    rpcc_close(f->rpc);
    f->rpc = NULL;
    if (f->kv) kvc_close(f->kv);
    f->kv = NULL;
}

void wr_start(wr_fixture *f, const char *name, const char *extra)
{
    assert_int_equal(hx_init(&f->m, name, extra), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    wr_connect(f);
}

int wr_call(wr_fixture *f, uint32_t method, const ProtobufCMessage *req,
            const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out)
{
    int status = -1;
    uint8_t *body = NULL;
    size_t blen = 0;
    if (out) *out = NULL;
    char *msg = NULL;
    int rc = rpcc_call_msg(f->rpc, WR_SVC, method, req, out ? desc : NULL, out, &status, &body, &blen, &msg);
    if (rc != 0) fail_msg("weight method %u: transport %d: %s", method, rc, rpcc_last_error(f->rpc));
    f->last_error[0] = '\0';
    if (status != 0 && blen > 0)
        snprintf(f->last_error, sizeof(f->last_error), "%.*s", (int)blen, (char *)body);
    else if (status != 0 && msg != NULL) /* the host refused it: the envelope's message */
        snprintf(f->last_error, sizeof(f->last_error), "%s", msg);
    free(body);
    free(msg);
    return status;
}

void wr_set_identity(Wmrpc__WeightIdentity *id, const char *tenant, const char *ns, const char *res,
                     uint64_t gen)
{
    wmrpc__weight_identity__init(id);
    id->tenant = (char *)tenant;
    id->namespace_id = (char *)ns;
    id->resource_id = (char *)res;
    id->revision = (char *)"main";
    id->generation = gen;
}

int wr_begin(wr_fixture *f, const Wmrpc__WeightIdentity *id, int preferred, double ratio, int mode,
             Wmrpc__WeightMetadata **out)
{
    Wmrpc__ImportBeginRequest req = WMRPC__IMPORT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightPolicy pol = WMRPC__WEIGHT_POLICY__INIT;
    pol.preferred_residency = (uint32_t)preferred;
    pol.mixed_hot_ratio = ratio;
    pol.migration_mode = (uint32_t)mode;
    req.identity = (Wmrpc__WeightIdentity *)id;
    req.policy = &pol;
    Wmrpc__ImportBeginResponse *r = NULL;
    int st = wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_BEGIN, &req.base,
                     &wmrpc__import_begin_response__descriptor, (ProtobufCMessage **)&r);
    if (st == 0) {
        assert_non_null(r);
        assert_non_null(r->metadata);
        if (out) {
            *out = r->metadata;
            r->metadata = NULL;
        }
        wmrpc__import_begin_response__free_unpacked(r, NULL);
    }
    return st;
}

void wr_payload_key(const wr_upload *u, size_t i, char *out, size_t cap)
{
    snprintf(out, cap, "%s/payload/%zu", u->group, i);
}

void wr_put_some(wr_fixture *f, wr_upload *u, const Wmrpc__WeightMetadata *md, long skip, long extra)
{
    assert_true(u->n <= sizeof(u->sizes) / sizeof(u->sizes[0]));
    snprintf(u->group, sizeof(u->group), "%s", md->group_key);
    snprintf(u->manifest, sizeof(u->manifest), "%s", md->manifest_key);
    for (size_t i = 0; i < u->n + 1; i++) {
        if ((long)i == skip) continue;
        if (i == u->n && extra < 0) break;
        size_t idx = i == u->n ? (size_t)extra : i;
        uint64_t size = i == u->n ? 100 : u->sizes[i];
        char key[1200];
        wr_payload_key(u, idx, key, sizeof(key));
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

void wr_put_all(wr_fixture *f, wr_upload *u, const Wmrpc__WeightMetadata *md)
{
    wr_put_some(f, u, md, -1, -1);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int wr_commit(wr_fixture *f, const Wmrpc__WeightIdentity *id, uint64_t expected, const wr_upload *u,
              const wr_lies *l, Wmrpc__MetadataResponse **out)
{
    static const wr_lies none;
    if (l == NULL) l = &none;
    size_t count = u->n + (size_t)l->count_delta;
    char **keys = calloc(count ? count : 1, sizeof(char *));
    uint64_t bytes = 0;
    for (size_t i = 0; i < count; i++) {
        keys[i] = malloc(1200);
        wr_payload_key(u, i, keys[i], 1200);
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
    int st = wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_COMMIT, &req.base,
                     &wmrpc__metadata_response__descriptor, (ProtobufCMessage **)out);
    for (size_t i = 0; i < count; i++) free(keys[i]);
    free(keys);
    free(sorted);
    free(units);
    free(uptr);
    return st;
}

int wr_ident_call(wr_fixture *f, uint32_t method, const Wmrpc__WeightIdentity *id, uint64_t expected,
                  Wmrpc__MetadataResponse **out)
{
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    req.identity = (Wmrpc__WeightIdentity *)id;
    req.expected_metadata_generation = expected;
    return wr_call(f, method, &req.base, &wmrpc__metadata_response__descriptor, (ProtobufCMessage **)out);
}

Wmrpc__MetadataResponse *wr_get_md(wr_fixture *f, const Wmrpc__WeightIdentity *id)
{
    Wmrpc__MetadataResponse *r = NULL;
    int st = wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, id, 0, &r);
    if (st != 0) fail_msg("get_metadata: %d %s", st, f->last_error);
    return r;
}

int wr_wait_md(wr_fixture *f, const Wmrpc__WeightIdentity *id, int av, int wait_ms)
{
    for (int waited = 0; waited <= wait_ms; waited += 20) {
        Wmrpc__MetadataResponse *r = NULL;
        int st = wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, id, 0, &r);
        int done = av == 0 ? st == -102 /* NOT_FOUND */
                           : st == 0 && r->metadata != NULL &&
                                 (int)r->metadata->availability == av &&
                                 r->metadata->operation_id == 0;
        if (r != NULL) wmrpc__metadata_response__free_unpacked(r, NULL);
        if (done) return 0;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return -1;
}

int wr_is_exist(wr_fixture *f, const Wmrpc__WeightIdentity *id)
{
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    req.identity = (Wmrpc__WeightIdentity *)id;
    Wmrpc__IsExistResponse *r = NULL;
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IS_EXIST, &req.base,
                             &wmrpc__is_exist_response__descriptor, (ProtobufCMessage **)&r),
                     0);
    int e = r->exists;
    wmrpc__is_exist_response__free_unpacked(r, NULL);
    return e;
}

int wr_lease_call(wr_fixture *f, uint32_t method, const Wmrpc__WeightIdentity *id, uint64_t lease_id,
                  uint64_t ttl, Wmrpc__LeaseResponse **out)
{
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    req.identity = (Wmrpc__WeightIdentity *)id;
    req.lease_id = lease_id;
    req.ttl_ms = ttl;
    return wr_call(f, method, &req.base, &wmrpc__lease_response__descriptor, (ProtobufCMessage **)out);
}

int wr_migrate(wr_fixture *f, const Wmrpc__WeightIdentity *id, int target, uint64_t expected,
               Wmrpc__MetadataResponse **out)
{
    Wmrpc__MigrateRequest req = WMRPC__MIGRATE_REQUEST__INIT;
    req.identity = (Wmrpc__WeightIdentity *)id;
    req.target_residency = (uint32_t)target;
    req.expected_metadata_generation = expected;
    return wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_MIGRATE, &req.base, &wmrpc__metadata_response__descriptor,
                   (ProtobufCMessage **)out);
}

int wr_update_policy(wr_fixture *f, const Wmrpc__WeightIdentity *id, int preferred, int mode,
                     uint64_t expected, Wmrpc__MetadataResponse **out)
{
    Wmrpc__UpdatePolicyRequest req = WMRPC__UPDATE_POLICY_REQUEST__INIT;
    Wmrpc__WeightPolicy pol = WMRPC__WEIGHT_POLICY__INIT;
    pol.preferred_residency = (uint32_t)preferred;
    pol.migration_mode = (uint32_t)mode;
    req.identity = (Wmrpc__WeightIdentity *)id;
    req.policy = &pol;
    req.expected_metadata_generation = expected;
    return wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_UPDATE_POLICY, &req.base,
                   &wmrpc__metadata_response__descriptor, (ProtobufCMessage **)out);
}

Wmrpc__OperationResponse *wr_get_op(wr_fixture *f, uint64_t op_id, int *status)
{
    Wmrpc__OperationRequest req = WMRPC__OPERATION_REQUEST__INIT;
    req.operation_id = op_id;
    Wmrpc__OperationResponse *r = NULL;
    *status = wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_OPERATION, &req.base,
                      &wmrpc__operation_response__descriptor, (ProtobufCMessage **)&r);
    return r;
}

Wmrpc__MetadataResponse *wr_publish(wr_fixture *f, const Wmrpc__WeightIdentity *id, int preferred,
                                    int mode, wr_upload *u)
{
    Wmrpc__WeightMetadata *md = NULL;
    assert_int_equal(wr_begin(f, id, preferred, 0.5, mode, &md), 0);
    wr_put_all(f, u, md);
    Wmrpc__MetadataResponse *r = NULL;
    int st = wr_commit(f, id, md->metadata_generation, u, NULL, &r);
    if (st != 0) fail_msg("commit: %d %s", st, f->last_error);
    wmrpc__weight_metadata__free_unpacked(md, NULL);
    return r;
}

Wmrpc__OperationResponse *wr_wait_op(wr_fixture *f, uint64_t op_id, int wait_ms)
{
    for (int waited = 0;; waited += 20) {
        int st;
        Wmrpc__OperationResponse *r = wr_get_op(f, op_id, &st);
        if (st != 0) fail_msg("get_operation %llu: %d %s", (unsigned long long)op_id, st, f->last_error);
        if (r->operation->state != 1) return r;
        if (waited > wait_ms)
            fail_msg("operation %llu still RUNNING after %d ms (done %llu/%llu, attempts %u, error '%s')",
                     (unsigned long long)op_id, wait_ms, (unsigned long long)r->operation->members_done,
                     (unsigned long long)r->operation->members_total, r->operation->attempts,
                     r->operation->error ? r->operation->error : "");
        wmrpc__operation_response__free_unpacked(r, NULL);
        nanosleep(&(struct timespec){0, 20000000L}, NULL);
    }
}

uint64_t wr_wait_progress(wr_fixture *f, uint64_t op_id, uint64_t at, int wait_ms)
{
    for (int waited = 0;; waited += 5) {
        int st;
        Wmrpc__OperationResponse *op = wr_get_op(f, op_id, &st);
        assert_int_equal(st, 0);
        uint64_t done = op->operation->members_done;
        int running = op->operation->state == 1;
        wmrpc__operation_response__free_unpacked(op, NULL);
        if (!running) fail_msg("operation %llu ended before the kill", (unsigned long long)op_id);
        if (done >= at) return done;
        if (waited > wait_ms) fail_msg("operation %llu made no progress", (unsigned long long)op_id);
        nanosleep(&(struct timespec){0, 5000000L}, NULL);
    }
}

int wr_upsert_phase_order(int mode, int phase)
{
    static const int pf[] = {WEIGHT_PHASE_CLAIMED, WEIGHT_PHASE_IMPORTING_TARGET,
                             WEIGHT_PHASE_BASE_FENCED, WEIGHT_PHASE_DRAINING_BASE,
                             WEIGHT_PHASE_DELETING_BASE, WEIGHT_PHASE_COMMITTED};
    static const int df[] = {WEIGHT_PHASE_CLAIMED, WEIGHT_PHASE_DELETING_BASE,
                             WEIGHT_PHASE_BASE_DELETED, WEIGHT_PHASE_IMPORTING_TARGET,
                             WEIGHT_PHASE_COMMITTED};
    const int *seq = mode == WEIGHT_UPSERT_PUT_FIRST ? pf : df;
    int n = mode == WEIGHT_UPSERT_PUT_FIRST ? 6 : 5;
    for (int i = 0; i < n; i++)
        if (seq[i] == phase) return i;
    return 99;
}
