/* weight_upsert.c -- weight_upsert, the client side of generation replacement.
 *
 * weight_upsert makes the master record a replacement claim for the base's
 * lineage (UPSERT_BEGIN, durable before it answers), then hands the caller
 * the writer of weight_put for the target generation once the claim allows
 * the import: at once under PUT_FIRST, after the base is deleted under
 * DELETE_FIRST (polled with UPSERT_STATUS). Everything after the target's
 * commit -- fencing the base, draining its leases, deleting it, committing
 * the watermark -- is the master's; weight_upsert_status follows it. The
 * request id, when the caller gives none, is derived deterministically from
 * the request's immutable arguments, so a retry after a lost reply is the
 * same request and resumes the same claim. */
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "wc_store.h"

#define M(name) WMRPC__WEIGHT_METHOD__WEIGHT_##name
#define WC_UPSERT_WAIT_DEFAULT_MS 120000
#define WC_UPSERT_POLL_MS 20

const char *weight_upsert_phase_name(int phase)
{
    static const char *n[] = {"?", "CLAIMED", "IMPORTING_TARGET", "BASE_FENCED", "DRAINING_BASE",
                              "DELETING_BASE", "BASE_DELETED", "COMMITTED", "ABORTED"};
    return phase >= 1 && phase <= 8 ? n[phase] : "?";
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

static void claim_from_wire(const Wmrpc__UpsertClaim *w, weight_upsert_claim *out)
{
    memset(out, 0, sizeof(*out));
    copy_str(out->request_id, sizeof out->request_id, w->request_id);
    if (w->base_identity) wc_from_wire_identity(w->base_identity, &out->base);
    if (w->target_identity) wc_from_wire_identity(w->target_identity, &out->target);
    out->mode = (weight_upsert_mode)w->mode;
    out->phase = (int)w->phase;
    out->expected_metadata_generation = w->expected_metadata_generation;
    out->committed_watermark = w->committed_watermark;
    copy_str(out->error, sizeof out->error, w->error);
    out->created_ms = w->created_ms;
    out->updated_ms = w->updated_ms;
}

/* The derived request id: "wu-" and the first 32 hex digits of SHA-256 over
 * the canonical base identity, target generation, mode and expected
 * metadata generation, each field followed by a NUL. */
static int derive_request_id(const weight_identity *base, const char *tenant,
                             uint64_t target_generation, weight_upsert_mode mode,
                             uint64_t expected, char out[129])
{
    char nums[128];
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL) return WEIGHT_ENOMEM;
    int n = snprintf(nums, sizeof nums, "%" PRIu64 "%c%" PRIu64 "%c%d%c%" PRIu64, base->generation,
                     0, target_generation, 0, (int)mode, 0, expected);
    const char *parts[4] = {tenant, base->namespace_id, base->resource_id, base->revision};
    int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
             EVP_DigestUpdate(ctx, "weight_upsert/1", 16) == 1;
    for (int i = 0; ok && i < 4; i++) ok = EVP_DigestUpdate(ctx, parts[i], strlen(parts[i]) + 1) == 1;
    ok = ok && EVP_DigestUpdate(ctx, nums, (size_t)n) == 1 &&
         EVP_DigestFinal_ex(ctx, md, &mdlen) == 1;
    EVP_MD_CTX_free(ctx);
    if (!ok) return WEIGHT_ENOMEM;
    memcpy(out, "wu-", 3);
    for (int i = 0; i < 16; i++) snprintf(out + 3 + 2 * i, 3, "%02x", md[i]);
    return WEIGHT_OK;
}

static int status_call(weight_store *s, const weight_identity *id, weight_upsert_claim *claim)
{
    Wmrpc__UpsertStatusRequest req = WMRPC__UPSERT_STATUS_REQUEST__INIT;
    Wmrpc__UpsertResponse *r = NULL;
    Wmrpc__WeightIdentity wid;
    char tenant[WEIGHT_ID_MAX + 1];
    weight_identity lin = *id;
    if (lin.generation == 0) lin.generation = 1;
    wc_wire_identity(s, &lin, &wid, tenant);
    req.lineage = &wid;
    int rc = wc_call(s, &s->rpc, M(UPSERT_STATUS), &req.base, &wmrpc__upsert_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    if (r->claim == NULL) {
        wmrpc__upsert_response__free_unpacked(r, NULL);
        return wc_fail(s, WEIGHT_ENOT_FOUND, "lineage %s/%s/%s has no replacement claim",
                       id->namespace_id, id->resource_id, id->revision);
    }
    claim_from_wire(r->claim, claim);
    wmrpc__upsert_response__free_unpacked(r, NULL);
    return WEIGHT_OK;
}

int weight_upsert_status(weight_store *s, const weight_identity *id, weight_upsert_claim *claim)
{
    if (s == NULL) return WEIGHT_EINVALID_ARGUMENT;
    s->err[0] = '\0';
    if (id == NULL || claim == NULL || !id->namespace_id[0] || !id->resource_id[0] ||
        !id->revision[0])
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "weight_upsert_status: incomplete identity");
    return status_call(s, id, claim);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* 1 when the claim's target no longer needs writing. */
static int target_done(const weight_upsert_claim *c)
{
    if (c->phase == WEIGHT_PHASE_COMMITTED) return 1;
    return c->mode == WEIGHT_UPSERT_PUT_FIRST &&
           (c->phase == WEIGHT_PHASE_BASE_FENCED || c->phase == WEIGHT_PHASE_DRAINING_BASE ||
            c->phase == WEIGHT_PHASE_DELETING_BASE);
}

int weight_upsert(weight_store *s, const weight_identity *replacing, uint64_t target_generation,
                  weight_upsert_mode mode, const char *request_id,
                  uint64_t expected_metadata_generation, const weight_policy *policy,
                  uint64_t wait_ms, weight_upsert_claim *claim, weight_writer **out)
{
    Wmrpc__UpsertBeginRequest req = WMRPC__UPSERT_BEGIN_REQUEST__INIT;
    Wmrpc__UpsertResponse *r = NULL;
    Wmrpc__WeightIdentity wid;
    char tenant[WEIGHT_ID_MAX + 1];
    char rid[129];
    weight_upsert_claim c;
    int rc;
    if (s == NULL) return WEIGHT_EINVALID_ARGUMENT;
    s->err[0] = '\0';
    if (out == NULL || replacing == NULL || !replacing->namespace_id[0] ||
        !replacing->resource_id[0] || !replacing->revision[0] || replacing->generation == 0)
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT,
                       "weight_upsert: the base needs namespace, resource, revision and generation");
    *out = NULL;
    if (mode == 0) mode = WEIGHT_UPSERT_PUT_FIRST;
    if (mode != WEIGHT_UPSERT_PUT_FIRST && mode != WEIGHT_UPSERT_DELETE_FIRST)
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "weight_upsert: mode %d is not an upsert mode",
                       (int)mode);
    if (target_generation <= replacing->generation)
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT,
                       "weight_upsert: target generation %" PRIu64
                       " is not above the base generation %" PRIu64,
                       target_generation, replacing->generation);
    if (request_id != NULL && (request_id[0] == '\0' || strlen(request_id) > 128))
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "weight_upsert: request_id must be 1..128 bytes");
    if ((rc = wc_require_generation(s, "weight_upsert", expected_metadata_generation)) < 0) return rc;
    wc_wire_identity(s, replacing, &wid, tenant);
    if (request_id == NULL) {
        if ((rc = derive_request_id(replacing, tenant, target_generation, mode,
                                    expected_metadata_generation, rid)) < 0)
            return wc_fail(s, rc, "weight_upsert: cannot derive the request id");
        request_id = rid;
    }
    req.base_identity = &wid;
    req.target_generation = target_generation;
    req.mode = (uint32_t)mode;
    req.request_id = (char *)request_id;
    req.expected_metadata_generation = expected_metadata_generation;
    rc = wc_call_patient(s, &s->rpc, M(UPSERT_BEGIN), &req.base,
                         &wmrpc__upsert_response__descriptor, (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    if (r->claim == NULL) {
        wmrpc__upsert_response__free_unpacked(r, NULL);
        return wc_fail(s, WEIGHT_EPROTO, "upsert begin: reply without a claim");
    }
    claim_from_wire(r->claim, &c);
    wmrpc__upsert_response__free_unpacked(r, NULL);
    if (claim) *claim = c;
    if (c.phase == WEIGHT_PHASE_ABORTED)
        return wc_fail(s, WEIGHT_ECONFLICT,
                       "replacement claim %s was aborted (%s); a new attempt needs another "
                       "request_id",
                       c.request_id, c.error[0] ? c.error : "no reason recorded");
    if (target_done(&c)) return WEIGHT_OK;

    if (mode == WEIGHT_UPSERT_DELETE_FIRST) {
        /* The target import opens once the base is deleted. */
        uint64_t waited = 0, limit = wait_ms ? wait_ms : WC_UPSERT_WAIT_DEFAULT_MS;
        while (c.phase == WEIGHT_PHASE_CLAIMED || c.phase == WEIGHT_PHASE_DELETING_BASE) {
            if (waited >= limit)
                return wc_fail(s, WEIGHT_EBUSY,
                               "replacement claim %s: the base is still being deleted (phase %s) "
                               "after %" PRIu64 " ms; retry the same request",
                               c.request_id, weight_upsert_phase_name(c.phase), waited);
            sleep_ms(WC_UPSERT_POLL_MS);
            waited += WC_UPSERT_POLL_MS;
            if ((rc = status_call(s, replacing, &c)) < 0) return rc;
            if (strcmp(c.request_id, request_id) != 0)
                return wc_fail(s, WEIGHT_ECONFLICT, "the lineage's claim is now %s", c.request_id);
        }
        if (claim) *claim = c;
        if (target_done(&c)) return WEIGHT_OK;
    }

    weight_identity target = *replacing;
    target.generation = target_generation;
    weight_writer *w = NULL;
    rc = wc_put_begin(s, &target, policy, 0, &w);
    if (rc == WEIGHT_ECONFLICT) {
        /* The target may be READY already (a retry after its commit). */
        weight_metadata md;
        if (weight_get_metadata(s, &target, &md, NULL) == WEIGHT_OK &&
            (md.availability == WEIGHT_READY || md.availability == WEIGHT_DEGRADED)) {
            s->err[0] = '\0';
            return WEIGHT_OK;
        }
        return rc;
    }
    if (rc < 0) return rc;
    if (mode == WEIGHT_UPSERT_DELETE_FIRST) wc_writer_keep_open(w);
    *out = w;
    return WEIGHT_OK;
}
