/* wm_mgmt.h -- what the management RPC files share (private to weight_plugin/).
 *
 * The management RPCs of service 16 are cut by responsibility:
 * wm_mgmt_txn.c (mutations in flight, replies, append and publish, request
 * decoding and record preparation), wm_mgmt_import.c (begin, commit, abort),
 * wm_mgmt_query.c (metadata, existence, size, list, operation),
 * wm_mgmt_mutate.c (policy updates, migrations, removals), wm_mgmt_lease.c
 * (grant, renew, release) and weight_management.c (the method table,
 * registration and metrics); wm_reply_encode.c and wm_request_decode.c
 * pack the identity reads' replies and decode their request by hand. This
 * header holds the prepared-record type and the helpers they all use;
 * nothing outside the management RPCs includes it. Everything runs on the
 * master's loop thread. */
#ifndef WM_MGMT_H
#define WM_MGMT_H

#include <stddef.h>
#include <stdint.h>

#include "weight_rpc.pb-c.h"
#include "wm_plugin.h"

typedef enum wm_txn_kind {
    WM_TXN_UPSERT = 1,
    WM_TXN_DELETE = 2,
    WM_TXN_LEASE_UPSERT = 3,
    WM_TXN_LEASE_DELETE = 4
} wm_txn_kind;

/* What the durable callback answers. */
typedef enum wm_reply_kind {
    WM_REPLY_NONE = 0,
    WM_REPLY_BEGIN = 1,     /* ImportBeginResponse */
    WM_REPLY_METADATA = 2,  /* MetadataResponse */
    WM_REPLY_LEASE = 3,     /* LeaseResponse */
    WM_REPLY_DELETED = 4    /* MetadataResponse without metadata (record gone) */
} wm_reply_kind;

/* One prepared record and who waits for it. Owned by the pending list from
 * append to the durable callback. */
struct wm_txn {
    wm_plugin *p;
    wm_txn_kind kind;
    wm_reply_kind reply;
    smp_rpc_call *call;          /* NULL: nobody waits */
    char group_key[WM_KEY_MAX + 1];
    uint64_t lease_end_id;       /* LEASE_DELETE: the lease */
    wm_metadata_upsert up;       /* operations point into ops[] */
    wm_operation ops[2];
    int owns_affinity;
    wm_metadata_delete del;
    uint64_t del_ops[1];
    wm_lease lease;
    wm_lease_delete lease_end;
    wm_applied_fn applied;       /* lifecycle callback, or NULL */
    void *applied_arg;
    wm_txn *next;                /* pending list */
    wm_rev_keys keys;            /* UPSERT: up.revision's keys once appended */
    char *strs;                  /* owned: the strings of the record's identities
                                  * and an upsert's request id once appended
                                  * (wm_txn_own_ids) */
};

#define WM_DECODE(var, type, fn, p, call, body, len)                                     \
    type *var = fn(NULL, len, body);                                                    \
    if (var == NULL)                                                                    \
        return wm_reply_error(p, call, SMP_EPROTO, "request body does not decode as %s", \
                              #type)


/* Wire views of the records; they borrow the strings of the record. */
typedef struct wm_pb_identity {
    Wmrpc__WeightIdentity m;
} wm_pb_identity;
typedef struct wm_pb_meta {
    Wmrpc__WeightMetadata m;
    Wmrpc__WeightIdentity id;
    Wmrpc__WeightPolicy policy;
} wm_pb_meta;
typedef struct wm_pb_op {
    Wmrpc__WeightOperation m;
    Wmrpc__WeightIdentity id;
} wm_pb_op;

/* -- wm_mgmt_txn.c: records in flight ------------------------------------- */

/* Free a record (with any affinity it owns). NULL is a no-op. */
void wm_txn_free(wm_txn *t);
/* A zeroed record of `kind` for the revision of group_key; NULL on OOM. */
wm_txn *wm_txn_new(wm_plugin *p, wm_txn_kind kind, const char *group_key);
/* Copy the strings of every identity t's record names, and an upsert's
 * request id, into storage t owns
 * (t->strs), so the record outlives the revision, lease or caller's buffer
 * they were borrowed from. The append does it; a record held before its
 * append (an import begin waits for its group flag) does it first.
 * SMP_ENOMEM (t unchanged). */
int wm_txn_own_ids(wm_txn *t);
/* Take t off the pending list (it stays the caller's). */
void wm_pending_remove(wm_plugin *p, wm_txn *t);
/* Append t for a waiting call with the reply of kind `reply`; on failure the
 * call is answered (`what` names the step) and t freed. Always SMP_OK. */
int wm_submit(wm_plugin *p, wm_txn *t, smp_rpc_call *call, wm_reply_kind reply, const char *what);
/* Append t for call without answering a failure: on failure t is freed
 * and the append's code returned (SMP_EGATE, ...) for the caller to act on
 * (and answer). */
int wm_submit_try(wm_plugin *p, wm_txn *t, smp_rpc_call *call, wm_reply_kind reply);

/* Append t with nobody waiting; on failure t is freed and the append's
 * code returned (SMP_EGATE, ...). */
int wm_txn_submit_quiet(wm_plugin *p, wm_txn *t);

/* -- wm_mgmt_txn.c: replies ----------------------------------------------- */

/* The refusal of an append that failed before it was queued (gate, standby,
 * durability), `what` naming the step. Always SMP_OK. */
int wm_reply_append_error(wm_plugin *p, smp_rpc_call *call, int rc, const char *what);
/* Pack m and answer SMP_OK with it (ENOMEM answered as such). */
int wm_reply_packed(wm_plugin *p, smp_rpc_call *call, const ProtobufCMessage *m);
/* Fill the wire views; they borrow the record's strings. */
void wm_pb_identity_set(Wmrpc__WeightIdentity *m, const wm_identity *id);
void wm_pb_meta_set(wm_pb_meta *v, const wm_revision *r);
void wm_pb_op_set(wm_pb_op *v, const wm_operation *op);
/* MetadataResponse (rev NULL: empty), ImportBeginResponse, LeaseResponse
 * (either part may be NULL). */
int wm_reply_metadata(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev);
/* The same with operation o (may be NULL) instead of rev's active one. */
int wm_reply_metadata_op(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev,
                         const wm_operation *o);
int wm_reply_begin(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev);

/* -- wm_reply_encode.c: the MetadataResponse packed by hand ----------------- */

/* Pack the MetadataResponse of rev (NULL: the empty response) and its
 * operation o (may be NULL; left out when rev is NULL) into buf, the bytes
 * protobuf_c_message_pack gives for the wire views of wm_pb_meta_set and
 * wm_pb_op_set. Returns the packed size; buf (may be NULL) is written only
 * when that size is at most cap, so a caller whose buffer was too small
 * calls again with one of the size returned. */
size_t wm_pack_metadata_response(const wm_revision *rev, const wm_operation *o, uint8_t *buf,
                                 size_t cap);
/* The most bytes an IsExistResponse takes. */
#define WM_IS_EXIST_RESPONSE_MAX 2
/* Pack the IsExistResponse of exists (0 or 1) into out, the bytes
 * protobuf_c_message_pack gives; returns their count (0 for false). */
size_t wm_pack_is_exist_response(int exists, uint8_t out[WM_IS_EXIST_RESPONSE_MAX]);
int wm_reply_lease(wm_plugin *p, smp_rpc_call *call, const wm_lease *l, const wm_revision *rev);

/* -- wm_request_decode.c: the IdentityRequest decoded by hand -------------- */

/* Room for the strings of an identity at its limits (4 x 256 bytes) and a
 * request id of 128, with their NULs: no malloc for a request that can pass
 * the checks. */
#define WM_ID_REQUEST_ROOM 1280

/* A decoded IdentityRequest: m (and m.identity, when given, pointing at id)
 * as wmrpc__identity_request__unpack would give it; its strings live in
 * room, or in heap when longer. */
typedef struct wm_id_request {
    Wmrpc__IdentityRequest m;
    Wmrpc__WeightIdentity id;
    char *heap;
    char room[WM_ID_REQUEST_ROOM];
} wm_id_request;

/* Decode body[0, len) into *r, accepting and refusing exactly what
 * wmrpc__identity_request__unpack does. 0; -1 when the bytes do not decode
 * (nothing to release); SMP_ENOMEM. After 0, release with
 * wm_id_request_fini. */
int wm_id_request_decode(wm_id_request *r, const uint8_t *body, size_t len);
/* Free what a decode took beyond r's room. */
void wm_id_request_fini(wm_id_request *r);

/* -- wm_mgmt_txn.c: request decoding and fences ---------------------------- */

/* "tenant/ns/resource/revision@generation" into buf; returns buf. */
const char *wm_id_text(const wm_identity *id, char *buf, size_t cap);
/* The checked identity of a request into *id: 1, or 0 with INVALID_ARGUMENT
 * answered. */
int wm_identity_in(wm_plugin *p, smp_rpc_call *call, const Wmrpc__WeightIdentity *pid,
                   wm_identity_buf *id);
/* The revision of a request, or NULL with NOT_FOUND / INVALID_ARGUMENT
 * answered. */
const wm_revision *wm_lookup(wm_plugin *p, smp_rpc_call *call, const Wmrpc__WeightIdentity *pid,
                             wm_identity_buf *id);
/* 1 when no record of rev is in flight, else 0 with BUSY answered. */
int wm_check_idle(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev);
/* 1 when expected is rev's metadata generation, else 0 with
 * STALE_GENERATION answered. */
int wm_check_cas(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, uint64_t expected);
/* wm_lookup then wm_check_cas: the revision, or NULL with the refusal
 * answered. */
const wm_revision *wm_lookup_cas(wm_plugin *p, smp_rpc_call *call,
                                 const Wmrpc__WeightIdentity *pid, wm_identity_buf *id,
                                 uint64_t expected);
/* wm_check_idle then wm_check_cas. */
int wm_check_fence(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, uint64_t expected);
/* A request policy over base (NULL: the cluster default), absent fields
 * kept, then validated. WM_OK or WM_EINVALID_ARGUMENT with a sentence. */
int wm_policy_from_pb(const wm_plugin *p, const Wmrpc__WeightPolicy *in, const wm_policy *base,
                      wm_policy *out, char *msg, size_t cap);

/* -- wm_mgmt_txn.c: preparing records -------------------------------------- */

/* Fill a new MIGRATING operation of r toward `target` over all its
 * payloads (fresh id, RUNNING, created now). */
void wm_op_migrating(wm_plugin *p, wm_operation *op, const wm_revision *r, wm_residency target,
                     double ratio, uint64_t now);
/* A new UPSERT record of rev: a copy one metadata generation on, updated
 * now. NULL with "out of memory" answered. */
wm_txn *wm_txn_next(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev);
/* Attach to t's revision a MIGRATING operation over all its payloads. */
void wm_txn_migrating(wm_plugin *p, wm_txn *t, wm_residency target, double ratio);
/* Make t's revision DELETING with a DELETING operation over members/bytes. */
void wm_txn_deleting(wm_plugin *p, wm_txn *t, uint64_t members, uint64_t bytes);
/* 1 when t may follow rev (wm_metadata_mutation_check), else 0 with t freed
 * and "<noun> of <group> refused: <why>" answered. */
int wm_mutation_ok(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, wm_txn *t,
                   const char *noun, char *msg, size_t cap);
/* wm_mutation_ok, then wm_submit with a MetadataResponse. t is consumed;
 * the call is always answered. */
void wm_check_submit(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, wm_txn *t,
                     const char *noun, const char *what, char *msg, size_t cap);

/* -- wm_mgmt_txn.c: request ids (idempotent retries) ---------------------- */

/* The digest of a request's arguments (method and up to 8 words); never 0. */
uint64_t wm_request_digest(uint32_t method, const uint64_t *args, size_t n);
/* A mutation of rev carrying request id rid (NULL or "": none) fenced on
 * `expected`: 0 when it is a new request (go on with the CAS), or 1 with the
 * call answered -- INVALID_ARGUMENT for an id that is not 1..128 bytes of
 * UTF-8; for the id of the last request that changed rev, its first answer
 * (the revision as it is now with the operation the request created, even
 * ended; nothing appended) when digest and expected
 * match, BUSY while a record of rev is in flight, CONFLICT when the same id
 * comes with other arguments. Only the last request of a revision is
 * remembered (persisted in its record); an older id meets the CAS. */
int wm_request_replayed(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, const char *rid,
                        uint64_t digest, uint64_t expected);
/* Stamp t's revision with the request (rid NULL or "": clears what an
 * earlier request left, so its retry now meets the CAS). */
void wm_txn_request(wm_txn *t, const char *rid, uint64_t digest, uint64_t expected);

/* -- the RPC methods (weight_rpc.proto), one file per responsibility ------- */

int wm_rpc_import_begin(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_import_commit(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_import_abort(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_get_metadata(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_is_exist(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
/* What weight_is_exist would find of the revision id now, asked of the host
 * and kept when true (a revision that just turned READY: the first
 * weight_is_exist after a publish is then answered without asking). 1 when
 * READY with every key readable, else 0. */
int wm_exist_refresh(wm_plugin *p, const wm_identity *id);
int wm_rpc_get_size(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_list(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_get_operation(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_update_policy(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_migrate(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_remove(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
/* wm_repair.c */
int wm_rpc_repair(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_lease_acquire(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_lease_renew(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_lease_release(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len);

#endif /* WM_MGMT_H */
