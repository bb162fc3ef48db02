/* weight_rpc.h -- the weight plugin's RPC service (16) as the integration
 * tests drive it: raw protobuf-c requests over rpc_client and payload uploads
 * over kv_client, against a master started with harness.c.
 *
 * Shared by test_weight_publish.c and test_weight_lifecycle.c, which pin the
 * wire contract of proto/weight_rpc.proto from outside the plugin: the
 * statuses (WM_E* / SMP_E*), the error sentence in the reply body, and the
 * messages. The commit's digests are computed here from their definition
 * (sorted payload keys; one "unit <bytes> <members>" line and the member keys
 * per affinity unit), independently of the plugin's code. Helpers fail the
 * running cmocka test on a transport error or an undecodable reply; a status
 * the server answers is returned for the test to assert. Only tests link
 * this (the test_harness library). */
#ifndef TEST_WEIGHT_RPC_H
#define TEST_WEIGHT_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "harness.h"
#include "rpc_client.h"
#include "weight_rpc.pb-c.h"

/* The weight plugin's service number. */
#define WR_SVC 16

/* The RFC's codes as weight_management.h numbers them (WM_E*). */
#define WR_E_INVALID_ARGUMENT -101
#define WR_E_NOT_FOUND -102
#define WR_E_NOT_READY -103
#define WR_E_CONFLICT -104
#define WR_E_STALE_GENERATION -105
#define WR_E_BUSY -106
#define WR_E_LEASE_EXPIRED -107
#define WR_E_POLICY_UNSATISFIABLE -109

/* Availability, residency, migration mode and operation kind on the wire. */
enum { WR_AV_IMPORTING = 1, WR_AV_READY = 2, WR_AV_DEGRADED = 3, WR_AV_DELETING = 4, WR_AV_DELETED = 5 };
enum { WR_RS_UNKNOWN = 0, WR_RS_HOT = 1, WR_RS_COLD = 2, WR_RS_MIXED = 3, WR_RS_ABSENT = 4 };
enum { WR_MODE_PINNED = 1, WR_MODE_MANUAL = 2, WR_MODE_AUTO = 3 };
enum { WR_OPK_MIGRATING = 1, WR_OPK_DELETING = 3 };

/* A test's master and its two clients. Zeroed (wr_setup), then hx_init /
 * hx_start (or wr_start) and wr_connect. last_error holds the reply body of
 * the last call that was refused -- or, when the host refused it before the
 * plugin saw it (authorization, limits), the envelope's message ("" after a
 * success). */
typedef struct wr_fixture {
    hx_master m;
    rpcc_conn *rpc;
    kvc *kv;
    char last_error[1024];
} wr_fixture;

/* cmocka setup / teardown: a zeroed fixture in *state; teardown closes the
 * clients, kills the master, removes its directory and frees the fixture. */
int wr_setup(void **state);
int wr_teardown(void **state);

/* Connect f->rpc and f->kv to the running master (asserts). */
void wr_connect(wr_fixture *f);

/* Close both clients (either may be NULL); they are NULL afterwards. */
void wr_disconnect(wr_fixture *f);

/* hx_init(name, extra) + hx_start (10 s) + wr_connect, asserting each. */
void wr_start(wr_fixture *f, const char *name, const char *extra);

/* Call `method` of service 16 with req (packed; may be NULL for an empty
 * body). Returns the server's status. When it is 0 and out is not NULL, the
 * reply unpacked with desc goes to *out (caller frees); when it is not 0,
 * *out (if given) is NULL and the refusal's sentence is in f->last_error.
 * A transport error or a reply that does not decode fails the test. */
int wr_call(wr_fixture *f, uint32_t method, const ProtobufCMessage *req,
            const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out);

/* Fill id (revision "main"); the strings are borrowed, not copied. */
void wr_set_identity(Wmrpc__WeightIdentity *id, const char *tenant, const char *ns, const char *res,
                     uint64_t gen);

/* IMPORT_BEGIN with that policy: the status; on success and when out is not
 * NULL, the revision's metadata (caller frees with
 * wmrpc__weight_metadata__free_unpacked). */
int wr_begin(wr_fixture *f, const Wmrpc__WeightIdentity *id, int preferred, double ratio, int mode,
             Wmrpc__WeightMetadata **out);

/* A revision's uploads: n payloads (at most 128) of the given sizes, in
 * affinity units of `per_unit` consecutive payloads (0: 1), and the manifest.
 * The test sets n, sizes and per_unit; wr_put_some fills the rest. */
typedef struct wr_upload {
    char group[1100];
    char manifest[1100];
    size_t n;
    uint64_t sizes[128];
    size_t per_unit;
    unsigned char manifest_sha[32];
    char manifest_body[64];
} wr_upload;

/* "<group>/payload/<i>" into out (cap bytes, truncated). */
void wr_payload_key(const wr_upload *u, size_t i, char *out, size_t cap);

/* Upload the payloads (WEIGHT; payload i holds bytes (i * 31 + b) & 0xff)
 * and the manifest ("manifest <resource>", METADATA) into md's group, and
 * record group, manifest key and manifest SHA-256 in u. skip: an index not
 * uploaded (-1: none); extra: an additional payload index uploaded with 100
 * bytes (-1: none). A refused put fails the test. */
void wr_put_some(wr_fixture *f, wr_upload *u, const Wmrpc__WeightMetadata *md, long skip, long extra);

/* wr_put_some with nothing skipped and nothing extra. */
void wr_put_all(wr_fixture *f, wr_upload *u, const Wmrpc__WeightMetadata *md);

/* Knobs for a commit that lies about one thing (all 0: the truth). */
typedef struct wr_lies {
    int count_delta;         /* payload count (and keys, units) off by this */
    int64_t bytes_delta;     /* logical bytes off by this */
    int bad_keys_digest;     /* flip a bit of payload_keys_sha256 */
    int bad_manifest_sha;    /* flip a bit of manifest_sha256 */
    int bad_affinity_digest; /* flip a bit of affinity_sha256 */
    int bad_unit_bytes;      /* the first unit's logical bytes one too many */
} wr_lies;

/* IMPORT_COMMIT at generation `expected` with the summary computed from u
 * (l may be NULL: no lies). Returns the status and, on success when out is
 * not NULL, the response (caller frees). */
int wr_commit(wr_fixture *f, const Wmrpc__WeightIdentity *id, uint64_t expected, const wr_upload *u,
              const wr_lies *l, Wmrpc__MetadataResponse **out);

/* A method taking an IdentityRequest and answering a MetadataResponse
 * (GET_METADATA, REMOVE, IMPORT_ABORT): the status, and on success the
 * response when out is not NULL (caller frees). */
int wr_ident_call(wr_fixture *f, uint32_t method, const Wmrpc__WeightIdentity *id, uint64_t expected,
                  Wmrpc__MetadataResponse **out);

/* GET_METADATA that must succeed (else the test fails); caller frees. */
Wmrpc__MetadataResponse *wr_get_md(wr_fixture *f, const Wmrpc__WeightIdentity *id);

/* Poll GET_METADATA every 20 ms until the revision is in availability av
 * with no active operation -- or, with av 0, until it is gone (NOT_FOUND:
 * the record left the table). 0, or -1 after wait_ms. */
int wr_wait_md(wr_fixture *f, const Wmrpc__WeightIdentity *id, int av, int wait_ms);

/* IS_EXIST that must succeed: 1 when the revision is readable, else 0. */
int wr_is_exist(wr_fixture *f, const Wmrpc__WeightIdentity *id);

/* A LeaseRequest method (ACQUIRE / RENEW / RELEASE): the status, and on
 * success the response when out is not NULL (caller frees). */
int wr_lease_call(wr_fixture *f, uint32_t method, const Wmrpc__WeightIdentity *id, uint64_t lease_id,
                  uint64_t ttl, Wmrpc__LeaseResponse **out);

/* MIGRATE to `target` at generation `expected`: the status, and on success
 * the response when out is not NULL (caller frees). */
int wr_migrate(wr_fixture *f, const Wmrpc__WeightIdentity *id, int target, uint64_t expected,
               Wmrpc__MetadataResponse **out);

/* UPDATE_POLICY to (preferred, mode) at generation `expected`: the status,
 * and on success the response when out is not NULL (caller frees). */
int wr_update_policy(wr_fixture *f, const Wmrpc__WeightIdentity *id, int preferred, int mode,
                     uint64_t expected, Wmrpc__MetadataResponse **out);

/* GET_OPERATION: *status gets the status; the response on success (caller
 * frees), else NULL. */
Wmrpc__OperationResponse *wr_get_op(wr_fixture *f, uint64_t op_id, int *status);
/* Poll GET_OPERATION every 20 ms until the operation is no longer RUNNING;
 * returns it (caller frees). Fails the test on a refused call or after
 * wait_ms, naming its progress, attempts and error. */
Wmrpc__OperationResponse *wr_wait_op(wr_fixture *f, uint64_t op_id, int wait_ms);
/* Poll the RUNNING operation every 5 ms until members_done reaches at least
 * `at` (the point a test kills its master at); returns members_done. Fails
 * the test when the operation ended first or after wait_ms. */
uint64_t wr_wait_progress(wr_fixture *f, uint64_t op_id, uint64_t at, int wait_ms);
/* Position of an upsert claim phase (WEIGHT_PHASE_*) in the order of its
 * mode (WEIGHT_UPSERT_*); 99 for a phase outside it (ABORTED). */
int wr_upsert_phase_order(int mode, int phase);

/* wr_begin (ratio 0.5) + wr_put_all + wr_commit of u, each required to
 * succeed; returns the commit's response (caller frees). */
Wmrpc__MetadataResponse *wr_publish(wr_fixture *f, const Wmrpc__WeightIdentity *id, int preferred,
                                    int mode, wr_upload *u);

#endif /* TEST_WEIGHT_RPC_H */
