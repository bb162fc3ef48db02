/* weight_management.h -- the weight plugin's contracts.
 *
 * The identifiers and value types every part of weight_mgmt.so shares: its
 * OpLog record types and their capability gates, its snapshot section, the
 * RFC's error codes, the revision identity and its canonical store keys, the
 * storage policy, the availability and residency states, and the plain
 * records the metadata store keeps (revision, operation, lease, lineage
 * claim, affinity summary). It also declares the pure helpers over those
 * values (validation, key encoding, enum names, the availability state
 * machine and the combination invariants); the record codec is declared in
 * wm_codec.h and the planner in weight_residency_planner.h. Nothing here
 * depends on the host beyond the ABI header, and no function declared here
 * calls the host. */
#ifndef WEIGHT_MANAGEMENT_H
#define WEIGHT_MANAGEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"

/* OpLog record types of the plugin (DESIGN.md section 4). */
enum {
    WM_OP_METADATA_UPSERT = 8,
    WM_OP_METADATA_DELETE = 9,
    WM_OP_LEASE_UPSERT = 10,
    WM_OP_LEASE_DELETE = 11,
    WM_OP_LINEAGE_CLAIM = 12
};

/* Encoding versions this build writes and can replay. */
#define WM_RECORD_ENCVER 1
/* Types 8 and 9 only: a record an older replica must not replay, because it
 * would silently drop part of it -- a type-8 record carrying a lease (the
 * promotion on access) or a type-9 record of reason OPERATIONS_EXPIRED --
 * is written with encoding version 2, which such a replica refuses (fail
 * closed) instead of ignoring the field it does not know. */
#define WM_RECORD_ENCVER_2 2

/* The gates of the RFC's "HA and Upgrade" section: types 8-11 need the first,
 * type 12 (generation replacement) the second, before the active master may
 * append them in HA mode. */
#define WM_GATE_MANAGEMENT "weight_management_oplog_capability_confirmed"
#define WM_GATE_LINEAGE "weight_lineage_oplog_capability_confirmed"

/* The plugin's snapshot section and its encoding version. */
#define WM_SECTION_NAME "weight_metadata"
#define WM_SECTION_ENCVER 1

/* The RFC's error codes, as negative numbers below the host's SMP_E* range so
 * both can travel in one status field. */
typedef enum wm_error {
    WM_OK = 0,
    WM_EINVALID_ARGUMENT = -101,
    WM_ENOT_FOUND = -102,
    WM_ENOT_READY = -103,
    WM_ECONFLICT = -104,
    WM_ESTALE_GENERATION = -105,
    WM_EBUSY = -106,
    WM_ELEASE_EXPIRED = -107,
    WM_EDURABILITY_FAILED = -108,
    WM_EPOLICY_UNSATISFIABLE = -109
} wm_error;

/* The RFC's name of an error ("STALE_GENERATION"); SMP_E* names otherwise.
 * Never NULL. */
const char *wm_error_name(int rc);

/* ------------------------------------------------------------------------ */
/* Limits                                                                    */
/* ------------------------------------------------------------------------ */

#define WM_ID_COMPONENT_MAX 256 /* bytes of one identity string (UTF-8) */
#define WM_KEY_MAX 1024         /* bytes of a store key: the host's key limit */
#define WM_REQUEST_ID_MAX 128   /* bytes of a lineage claim's request id */
#define WM_ERROR_TEXT_MAX 255   /* bytes of an operation's or claim's error */
#define WM_SHA256_LEN 32
#define WM_KEY_PREFIX "weights"

/* ------------------------------------------------------------------------ */
/* Identity, lineage and canonical keys                                      */
/* ------------------------------------------------------------------------ */

/* The lineage: a logical revision across all of its weight generations. Each
 * member is a NUL-terminated string of 1..WM_ID_COMPONENT_MAX bytes of valid
 * UTF-8. `ns` is the RFC's `namespace`. */
typedef struct wm_lineage {
    char tenant_id[WM_ID_COMPONENT_MAX + 1];
    char ns[WM_ID_COMPONENT_MAX + 1];
    char resource_id[WM_ID_COMPONENT_MAX + 1];
    char revision[WM_ID_COMPONENT_MAX + 1];
} wm_lineage;

/* The five-part revision identity: the lineage plus its weight generation.
 * The four strings are borrowed, NUL-terminated: an identity points at
 * storage something else owns -- a wm_identity_buf its caller filled, a
 * store entry, a decoded record's buffer, a lineage -- and a copy by
 * assignment shares it. Whatever keeps an identity longer than its source
 * copies the strings into storage of its own (wm_identity_pack), so a
 * stored identity takes the bytes its strings need, not four
 * WM_ID_COMPONENT_MAX buffers. A NULL string is invalid (wm_identity_check)
 * and compares as the empty string. */
typedef struct wm_identity {
    const char *tenant_id;
    const char *ns;
    const char *resource_id;
    const char *revision;
    uint64_t weight_generation;
} wm_identity;

/* An identity with storage of its own, for the stack and for parsers
 * (wm_identity_set, wm_key_parse): id points into s. Never copy one by
 * assignment (the copy would point into the original): wm_identity_buf_set. */
typedef struct wm_identity_buf {
    wm_identity id;
    char s[4][WM_ID_COMPONENT_MAX + 1];
} wm_identity_buf;

/* Copy id's strings (each at most WM_ID_COMPONENT_MAX bytes, longer ones are
 * cut; a NULL one becomes empty) and generation into *b, and point b->id at
 * them. */
void wm_identity_buf_set(wm_identity_buf *b, const wm_identity *id);

/* The bytes wm_identity_pack writes for id: each string and its NUL. */
size_t wm_identity_packed_len(const wm_identity *id);

/* Copy id's four strings, each followed by its NUL, to dst
 * (wm_identity_packed_len(id) bytes) and write to *out the identity that
 * points there (out may be id itself). Returns the byte after the last. */
char *wm_identity_pack(const wm_identity *id, char *dst, wm_identity *out);

/* Check one identity string given as len bytes (which may hold a NUL, which
 * is refused): 1..WM_ID_COMPONENT_MAX bytes of valid UTF-8 (shortest forms,
 * no surrogates, nothing above U+10FFFF), no NUL. WM_OK or
 * WM_EINVALID_ARGUMENT. */
int wm_component_check(const char *s, size_t len);

/* Check free text (an error message, a key read from disk): len bytes of
 * valid UTF-8 without NUL; empty is fine. WM_OK or WM_EINVALID_ARGUMENT. */
int wm_text_check(const char *s, size_t len);

/* Check every string of a lineage, and that the canonical keys of any
 * generation of it fit in WM_KEY_MAX bytes. On failure returns
 * WM_EINVALID_ARGUMENT and, when msg is not NULL, writes a sentence naming
 * the offending field into msg (truncated to cap). */
int wm_lineage_check(const wm_lineage *lin, char *msg, size_t cap);
int wm_identity_check(const wm_identity *id, char *msg, size_t cap);
/* wm_identity_check of an identity whose strings' lengths the caller
 * already has: len[i] is strnlen(string i, WM_ID_COMPONENT_MAX + 1) (0 for
 * a NULL string); NULL len: taken here. */
int wm_identity_check_len(const wm_identity *id, const size_t len[4], char *msg, size_t cap);

/* Fill an identity from strings (each copied into *out; a NULL one fails).
 * Validates as wm_identity_check does; *out is written only on success. The
 * other two convert between an identity and its lineage (no validation):
 * wm_identity_lineage copies the strings (each cut at WM_ID_COMPONENT_MAX
 * bytes), wm_lineage_identity points *out at lin's (borrowed). */
int wm_identity_set(wm_identity_buf *out,
                    const char *tenant_id,
                    const char *ns,
                    const char *resource_id,
                    const char *revision,
                    uint64_t weight_generation);
void wm_identity_lineage(const wm_identity *id, wm_lineage *out);
void wm_lineage_identity(const wm_lineage *lin, uint64_t generation, wm_identity *out);

/* Total orders used wherever determinism matters: byte-wise on tenant,
 * namespace, resource, revision, then numeric on the generation. <0, 0, >0. */
int wm_identity_cmp(const wm_identity *a, const wm_identity *b);
int wm_lineage_cmp(const wm_lineage *a, const wm_lineage *b);
int wm_identity_in_lineage(const wm_identity *id, const wm_lineage *lin);

/* Percent-encoding of one key component (RFC 3986): the unreserved bytes
 * A-Z a-z 0-9 - . _ ~ pass through, every other byte -- '/', '%', '@',
 * controls, each byte of a multi-byte UTF-8 sequence -- becomes %XX with
 * upper-case hex. Writes the NUL-terminated result into out; returns its
 * length, or WM_EINVALID_ARGUMENT when it does not fit in cap. */
int wm_pct_encode(const char *in, size_t len, char *out, size_t cap);

/* Inverse of wm_pct_encode, strict: only the canonical form is accepted
 * (literal bytes must be unreserved, %XX needs two upper-case hex digits and
 * must not encode an unreserved byte). Writes a NUL-terminated result;
 * returns its length, or WM_EINVALID_ARGUMENT. The result may contain a
 * NUL byte if the input encodes one; callers validate it. */
int wm_pct_decode(const char *in, size_t len, char *out, size_t cap);

/* Canonical keys (DESIGN.md section 6):
 *   group     weights/<tenant>/<namespace>/<resource_id>/<revision>/<generation>
 *   manifest  <group>/manifest
 *   payload   <group>/payload/<n>
 * Every string component is percent-encoded; numbers are decimal without
 * leading zeros. Each writes a NUL-terminated key into out (cap bytes, at
 * least WM_KEY_MAX + 1 suffices) and returns its length, or
 * WM_EINVALID_ARGUMENT for an invalid identity or a key longer than
 * WM_KEY_MAX. */
int wm_group_key(const wm_identity *id, char *out, size_t cap);
/* wm_group_key of an identity that passed wm_identity_check (not checked
 * again). */
int wm_group_key_checked(const wm_identity *id, char *out, size_t cap);
int wm_manifest_key(const wm_identity *id, char *out, size_t cap);
int wm_payload_key(const wm_identity *id, uint64_t n, char *out, size_t cap);

/* What a canonical key names. */
typedef enum wm_key_kind {
    WM_KEY_GROUP = 1,
    WM_KEY_MANIFEST = 2,
    WM_KEY_PAYLOAD = 3
} wm_key_kind;

/* Parse a canonical key back into its identity, kind and (for a payload) its
 * index. Anything that is not exactly what the builders above produce is
 * refused with WM_EINVALID_ARGUMENT (*out may then be partly written);
 * out_n may be NULL. */
int wm_key_parse(const char *key, wm_identity_buf *out, wm_key_kind *kind, uint64_t *out_n);

/* ------------------------------------------------------------------------ */
/* States and policy                                                         */
/* ------------------------------------------------------------------------ */

/* Whether a revision is complete and may be discovered and read. */
typedef enum wm_availability {
    WM_AVAIL_IMPORTING = 1,
    WM_AVAIL_READY = 2,
    WM_AVAIL_DEGRADED = 3,
    WM_AVAIL_DELETING = 4,
    WM_AVAIL_DELETED = 5
} wm_availability;

/* Where the required payloads are (observed), or where they should be
 * (preferred: HOT, COLD or MIXED only). */
typedef enum wm_residency {
    WM_RES_UNKNOWN = 0,
    WM_RES_HOT = 1,
    WM_RES_COLD = 2,
    WM_RES_MIXED = 3,
    WM_RES_ABSENT = 4
} wm_residency;

typedef enum wm_migration_mode {
    WM_MODE_PINNED = 1,
    WM_MODE_MANUAL = 2,
    WM_MODE_AUTO = 3
} wm_migration_mode;

typedef enum wm_op_kind {
    WM_OPK_MIGRATING = 1,
    WM_OPK_REPAIRING = 2,
    WM_OPK_DELETING = 3,
    WM_OPK_IMPORTING = 4
} wm_op_kind;

typedef enum wm_op_state {
    WM_OPS_RUNNING = 1,
    WM_OPS_SUCCEEDED = 2,
    WM_OPS_FAILED = 3
} wm_op_state;

typedef enum wm_upsert_mode {
    WM_UPSERT_PUT_FIRST = 1,
    WM_UPSERT_DELETE_FIRST = 2
} wm_upsert_mode;

/* Phases of a replacement claim. PUT_FIRST walks CLAIMED, IMPORTING_TARGET,
 * BASE_FENCED (target READY, base retired: no new leases), DRAINING_BASE,
 * DELETING_BASE, COMMITTED. DELETE_FIRST walks CLAIMED, DELETING_BASE,
 * BASE_DELETED, IMPORTING_TARGET, COMMITTED. ABORTED ends a claim whose
 * target failed (the base is intact under PUT_FIRST). */
typedef enum wm_claim_phase {
    WM_PHASE_CLAIMED = 1,
    WM_PHASE_IMPORTING_TARGET = 2,
    WM_PHASE_BASE_FENCED = 3,
    WM_PHASE_DRAINING_BASE = 4,
    WM_PHASE_DELETING_BASE = 5,
    WM_PHASE_BASE_DELETED = 6,
    WM_PHASE_COMMITTED = 7,
    WM_PHASE_ABORTED = 8
} wm_claim_phase;

/* Why a revision record leaves the table altogether (OpLog type 9). */
typedef enum wm_delete_reason {
    WM_DEL_IMPORT_ABORTED = 1,  /* an import that never became visible */
    WM_DEL_TOMBSTONE_EXPIRED = 2, /* a DELETED tombstone is forgotten */
    /* Only the listed ended operations leave the table (their retention is
     * over); the revision, if any, stays as it is. */
    WM_DEL_OPERATIONS_EXPIRED = 3
} wm_delete_reason;

#define WM_DEL_REASONS 4 /* one past the last reason (array bound) */

/* Why a lease ends (OpLog type 11). */
typedef enum wm_lease_end {
    WM_LEASE_RELEASED = 1,
    WM_LEASE_EXPIRED = 2,
    WM_LEASE_REVOKED = 3
} wm_lease_end;

/* Names as the RFC writes them ("READY", "MIXED", "AUTO", "PUT_FIRST", ...);
 * "?" for a value outside the enum. The *_from_name parsers accept any case
 * and return WM_OK or WM_EINVALID_ARGUMENT. */
const char *wm_availability_name(int v);
const char *wm_residency_name(int v);
const char *wm_mode_name(int v);
const char *wm_op_kind_name(int v);
const char *wm_op_state_name(int v);
const char *wm_upsert_mode_name(int v);
const char *wm_phase_name(int v);
int wm_availability_from_name(const char *s, wm_availability *out);
int wm_residency_from_name(const char *s, wm_residency *out);
int wm_mode_from_name(const char *s, wm_migration_mode *out);
int wm_op_kind_from_name(const char *s, wm_op_kind *out);
int wm_upsert_mode_from_name(const char *s, wm_upsert_mode *out);

/* Range checks over raw values (from disk or the wire). 1 valid, 0 not. */
int wm_availability_valid(int v);
int wm_residency_valid(int v);
int wm_mode_valid(int v);
int wm_op_kind_valid(int v);
int wm_op_state_valid(int v);
int wm_upsert_mode_valid(int v);
int wm_phase_valid(int v);

/* A revision's storage policy. The ratio is HOT logical bytes over all
 * logical bytes when preferred is MIXED; it is persisted (and validated)
 * whatever preferred is. */
typedef struct wm_policy {
    wm_residency preferred;      /* HOT, COLD or MIXED */
    double mixed_hot_ratio;      /* strictly between 0 and 1 */
    wm_migration_mode mode;
} wm_policy;

#define WM_DEFAULT_MIXED_HOT_RATIO 0.5

/* The built-in default: MIXED, 0.5, AUTO. */
wm_policy wm_policy_default(void);

/* WM_OK, or WM_EINVALID_ARGUMENT with a sentence naming the bad field. A
 * ratio of 0, 1, NaN or infinity is invalid. */
int wm_policy_check(const wm_policy *p, char *msg, size_t cap);

/* Build a policy from configuration words ("mixed", 0.5, "auto"), any case.
 * WM_OK or WM_EINVALID_ARGUMENT with a sentence naming the bad value. */
int wm_policy_from_names(const char *preferred,
                         double ratio,
                         const char *mode,
                         wm_policy *out,
                         char *msg,
                         size_t cap);

/* Resolve the policy of a new revision: the call's policy if given, else the
 * client's default if given, else the cluster default (NULL levels are
 * absent). A policy is taken whole, never merged field by field (a client
 * policy object always carries every field). The chosen policy is validated;
 * an invalid one fails with WM_EINVALID_ARGUMENT and does not fall through
 * to a lower level. *out is written only on success. */
int wm_policy_resolve(const wm_policy *call,
                      const wm_policy *client_default,
                      const wm_policy *cluster_default,
                      wm_policy *out);

/* ------------------------------------------------------------------------ */
/* Records                                                                   */
/* ------------------------------------------------------------------------ */

/* The lightweight metadata the master keeps per revision. Fields from
 * manifest_key to affinity_sha256 are the immutable summary sealed at commit
 * (zero while IMPORTING).
 *
 * group_key and manifest_key are the canonical keys of id (wm_group_key,
 * wm_manifest_key) and point at storage the revision does not own: the store
 * entry for a revision the store returns (valid while the revision is in the
 * store: an apply never moves them, a delete, load or free does), the
 * decoded record for one a decoder returns, the caller's buffers for one
 * built fresh (wm_revision_bind_keys). A copy by assignment shares them, so a
 * copy of a stored revision may be built, changed and submitted while the
 * stored one lives; the store copies the keys into its own entry. */
typedef struct wm_revision {
    wm_identity id;
    wm_policy policy;
    wm_availability availability;
    wm_residency residency;          /* observed */
    double observed_hot_ratio;       /* HOT logical bytes / logical bytes */
    uint64_t metadata_generation;    /* CAS fence, >= 1, +1 per mutation */
    uint64_t operation_id;           /* active operation, 0 = none */
    const char *group_key;           /* borrowed, see above */
    const char *manifest_key;        /* borrowed, see above */
    uint8_t manifest_sha256[WM_SHA256_LEN];
    uint64_t payload_count;
    uint64_t logical_bytes;
    uint8_t payload_keys_sha256[WM_SHA256_LEN]; /* see wm_payload_keys_digest */
    uint64_t affinity_count;
    uint8_t affinity_sha256[WM_SHA256_LEN];     /* see wm_affinity_digest */
    uint64_t created_ms;             /* wall clock */
    uint64_t updated_ms;
    uint64_t last_access_ms;
    uint32_t lease_count;            /* lease records naming this identity */
    /* Appended (issue 17): the last client request that changed the
     * revision (MIGRATE, UPDATE_POLICY, REMOVE with a request id), so that
     * its retry after a lost reply answers the first result. NULL or empty:
     * none; the digest of its arguments and the generation it was fenced on.
     * At most WM_REQUEST_ID_MAX bytes, borrowed like group_key (issue 20: it
     * was a fixed buffer of 129 bytes in every stored revision), except that
     * an apply that changes it moves it: a copy of a stored revision reads
     * it before the next apply, and a record in flight holds its own copy
     * (wm_txn_own_ids). */
    const char *request_id;
    uint64_t request_digest;
    uint64_t request_base_generation;
    uint64_t request_operation_id;   /* the operation it created (0: none) */
    /* Appended: where a DEGRADED revision belongs -- the payload residency
     * (HOT, COLD, MIXED) and hot ratio it had when it left READY, or the
     * target of the operation it was lost in, or what a policy update
     * since asked for -- so that once its members are readable again it
     * goes there, not recorded where the surviving replicas happen to be
     * (residency is the observation, ABSENT while nothing is readable).
     * UNKNOWN and 0 on every other availability, and on a DEGRADED record
     * written before this field (then the observation decides, as before).
     * Set and cleared by wm_revision_set_availability, moved by
     * wm_revision_degraded_toward. */
    wm_residency degraded_from;
    double degraded_from_hot_ratio;
} wm_revision;

/* Storage for the canonical keys of a revision built outside the store. */
typedef struct wm_rev_keys {
    char group_key[WM_KEY_MAX + 1];
    char manifest_key[WM_KEY_MAX + 1];
} wm_rev_keys;

/* Write the canonical group and manifest keys of rev->id into *keys and point
 * rev->group_key and rev->manifest_key at them (keys must outlive every use
 * of them through rev and its copies). WM_OK, or WM_EINVALID_ARGUMENT when
 * the identity is invalid or its keys exceed WM_KEY_MAX (rev unchanged). */
int wm_revision_bind_keys(wm_revision *rev, wm_rev_keys *keys);

/* An affinity unit: payload objects that must move together (complete
 * tensors and alias groups), with their logical bytes. */
typedef struct wm_affinity_unit {
    char **members;       /* owned payload keys */
    size_t n_members;
    uint64_t logical_bytes;
} wm_affinity_unit;

/* The affinity summary a commit delivers and the planner reads. Owns its
 * units; release with wm_affinity_clear(). A zeroed value is empty. */
typedef struct wm_affinity {
    wm_affinity_unit *units;
    size_t n_units;
    /* 1: the units, their member arrays and keys live in storage the
     * summary does not own (a snapshot load's, which outlives it:
     * wm_affinity_clear only forgets them); 0: each is malloc'ed and owned. */
    int borrowed;
} wm_affinity;

void wm_affinity_clear(wm_affinity *a);

/* Deep copy; *out is overwritten (not cleared first). SMP_ENOMEM. */
int wm_affinity_copy(const wm_affinity *in, wm_affinity *out);

/* Digests that seal a revision, so client and master agree on them:
 *  - payload keys: SHA-256 over the keys sorted byte-wise, each followed by
 *    one '\n';
 *  - affinity: SHA-256 over, for each unit in order, the line
 *    "unit <logical_bytes> <n_members>\n" then each member key and '\n'.
 * A key holding '\n' (never canonical) fails with WM_EINVALID_ARGUMENT;
 * SMP_ENOMEM if the sort buffer cannot be allocated. */
int wm_payload_keys_digest(const char *const *keys, size_t n, uint8_t out[WM_SHA256_LEN]);
int wm_affinity_digest(const wm_affinity *a, uint8_t out[WM_SHA256_LEN]);

/* Release the SHA-256 implementation the digests fetched once and keep
 * (the plugin's fini; a later digest fetches it again). */
void wm_digest_release(void);

/* Check an affinity summary against the revision it belongs to: every member
 * is a payload key of the revision's group, no member appears twice, the
 * count, bytes (sum over units) and digest match. WM_OK or
 * WM_EINVALID_ARGUMENT with a sentence. */
int wm_affinity_check(const wm_affinity *a, const wm_revision *rev, char *msg, size_t cap);
/* wm_affinity_check of a revision whose canonical group key the caller
 * holds (group_key: rev->group_key once wm_metadata_check passed on rev):
 * the same answer and sentence, without computing that key again. */
int wm_affinity_check_keyed(const wm_affinity *a, const wm_revision *rev, const char *group_key,
                            char *msg, size_t cap);

/* A background operation. Queryable by id after it ends; the revision then
 * no longer names it. Progress only grows across retries and failovers. */
typedef struct wm_operation {
    uint64_t id;                  /* >= 1 */
    wm_op_kind kind;
    wm_identity id_of;            /* the revision it works on */
    wm_residency target;          /* MIGRATING: HOT, COLD or MIXED; else UNKNOWN */
    double target_hot_ratio;      /* MIGRATING to MIXED: the ratio planned for */
    uint64_t members_done;
    uint64_t members_total;
    uint64_t bytes_done;
    uint64_t bytes_total;
    char cursor[WM_KEY_MAX + 1];  /* last member key finished ("" = none) */
    wm_op_state state;
    char error[WM_ERROR_TEXT_MAX + 1];
    uint32_t attempts;
    uint64_t created_ms;
    uint64_t updated_ms;
} wm_operation;

/* A revision lease: protects the revision from deletion and its readable
 * replicas from release until expiry_ms (wall clock). */
typedef struct wm_lease {
    uint64_t id;                  /* >= 1 */
    wm_identity id_of;
    uint64_t metadata_generation; /* the revision generation it was granted at */
    uint64_t granted_ms;
    uint64_t expiry_ms;
} wm_lease;

/* The one replacement transaction of a lineage. */
typedef struct wm_lineage_claim {
    char request_id[WM_REQUEST_ID_MAX + 1];
    wm_identity base;
    wm_identity target;           /* same lineage, higher generation */
    wm_upsert_mode mode;
    wm_claim_phase phase;
    uint64_t expected_metadata_generation; /* of the base */
    uint64_t committed_watermark; /* lineage watermark after this mutation */
    char error[WM_ERROR_TEXT_MAX + 1];
    uint64_t created_ms;
    uint64_t updated_ms;
} wm_lineage_claim;

/* A lineage's ordering state: its watermark (0 = nothing committed yet; a
 * committed target is always above its base, so never 0) and its claim. */
typedef struct wm_lineage_entry {
    wm_lineage lineage;
    uint64_t committed_watermark;
    int has_claim;
    wm_lineage_claim claim;
} wm_lineage_entry;

/* Point e's claim's base and target strings at e->lineage (their
 * generations stay): a stored claim borrows its entry's lineage, so this is
 * called whenever an entry is written or moved. A claim outside its entry's
 * lineage must have been refused before (wm_claim_check, the section
 * check). No-op without a claim. */
void wm_lineage_entry_bind(wm_lineage_entry *e);

/* ------------------------------------------------------------------------ */
/* The state machine (weight_metadata_rules.c)                               */
/* ------------------------------------------------------------------------ */

/* 1 if a revision may move from availability `from` to `to` in one mutation,
 * 0 otherwise. Staying in the same state is allowed (a mutation that changes
 * something else). The table:
 *   IMPORTING -> READY       commit published (first as HOT)
 *   IMPORTING -> DELETING    abort of an import that left members behind
 *   IMPORTING -> DELETED     abort of an import with an empty group
 *   READY     -> DEGRADED    a required member lost every readable replica
 *   DEGRADED  -> READY       repaired
 *   READY, DEGRADED -> DELETING   explicit removal accepted
 *   DELETING  -> DELETED     the group is verified empty (tombstone)
 * DELETED is terminal: a tombstone is never revived; a new import needs a new
 * generation. Out-of-range values are never allowed. */
int wm_availability_transition_ok(int from, int to);

/* Make next, a copy of rev about to be persisted, availability a, keeping
 * degraded_from right: entering DEGRADED from another availability records
 * where rev belongs -- the target of its active MIGRATING or REPAIRING
 * operation `active` when there is one (NULL: none; the revision was on its
 * way there, and a repair's residency as recorded is what it had not yet
 * restored), else rev's residency and hot ratio when HOT, COLD or MIXED
 * (else UNKNOWN); staying DEGRADED keeps rev's; any other availability
 * clears it. Every change of availability goes through here. */
void wm_revision_set_availability(wm_revision *next, const wm_revision *rev,
                                  const wm_operation *active, wm_availability a);

/* Record in next, a DEGRADED revision, that it belongs at `to` (HOT, COLD
 * or MIXED; mixed_ratio is the ratio for MIXED, its policy's when not in
 * (0, 1)): a policy update that moves a DEGRADED revision's preferred
 * residency, which can start no migration until the revision is READY. */
void wm_revision_degraded_toward(wm_revision *next, wm_residency to, double mixed_ratio);

/* The hot ratio residency `to` stands for: 1 for HOT, mixed_ratio for
 * MIXED, 0 otherwise. */
double wm_residency_hot_ratio(wm_residency to, double mixed_ratio);

/* Check the invariants one revision record must hold on its own. Returns
 * WM_OK, or WM_EINVALID_ARGUMENT and a sentence naming the invariant in msg
 * (may be NULL). Among them: a valid identity and policy; group and manifest
 * keys canonical for the identity; metadata_generation >= 1;
 * IMPORTING <-> UNKNOWN residency (DELETING may also be UNKNOWN, after an
 * aborted import); READY only with HOT, COLD or MIXED; ABSENT only with
 * DEGRADED, DELETING or DELETED; degraded_from UNKNOWN (ratio 0) unless
 * DEGRADED, where it is UNKNOWN, HOT, COLD or MIXED with a ratio that
 * residency allows; DELETED only with ABSENT, no lease and no
 * operation; IMPORTING and DELETING hold no lease; observed_hot_ratio 1 for
 * HOT, 0 for COLD/ABSENT/UNKNOWN, strictly between for MIXED; READY and
 * DEGRADED carry a sealed summary (payload_count >= 1, 1 <= affinity_count
 * <= payload_count); created_ms <= updated_ms; a request id of 0..128
 * bytes of UTF-8, with a base generation below the record's when set and
 * no digest or base without one. */
int wm_metadata_check(const wm_revision *rev, char *msg, size_t cap);
/* The rules of wm_metadata_check after the identity's own, for a revision
 * whose identity passed wm_identity_check (a decode that has just checked
 * it): the same answer and sentence, without checking it again. */
int wm_metadata_check_fields(const wm_revision *rev, char *msg, size_t cap);

/* Check an operation record alone (valid enums, id >= 1, progress done <=
 * total, a target only for MIGRATING, a cursor naming one of its revision's
 * member keys), and,
 * when rev is not NULL, against the revision: same identity; if it is the
 * revision's active operation it is RUNNING and its kind fits the
 * availability (IMPORTING op on IMPORTING, DELETING op on DELETING,
 * MIGRATING/REPAIRING on READY or DEGRADED); a RUNNING operation is the
 * active one. WM_OK or WM_EINVALID_ARGUMENT with a sentence. */
int wm_operation_check(const wm_operation *op, const wm_revision *rev, char *msg, size_t cap);

/* Check a lease (id >= 1, valid identity, granted_ms <= expiry_ms) and a
 * lineage claim (request id 1..WM_REQUEST_ID_MAX bytes of UTF-8, valid
 * identities of one lineage, target generation above the base's, valid
 * mode and phase, a phase that belongs to the mode). */
int wm_lease_check(const wm_lease *l, char *msg, size_t cap);
int wm_claim_check(const wm_lineage_claim *c, char *msg, size_t cap);

/* Check one mutation of a revision record, before -> after, as the active
 * master is about to persist it (before NULL: the record is being created).
 * Creation yields an IMPORTING record at metadata generation 1. A change
 * keeps the identity and created_ms, advances metadata_generation by exactly
 * one (else WM_ESTALE_GENERATION), moves availability along the table above
 * (else WM_ECONFLICT), never changes the sealed summary once the revision
 * left IMPORTING (manifest key and digest, group key, payload count, logical
 * bytes, payload-key digest, affinity count and digest; else WM_ECONFLICT),
 * never moves updated_ms or last_access_ms backwards, and leaves a record
 * that passes wm_metadata_check (else WM_EINVALID_ARGUMENT). */
int wm_metadata_mutation_check(const wm_revision *before,
                               const wm_revision *after,
                               char *msg,
                               size_t cap);

/* 1 when the manifest reference and payload summary -- what an import
 * commit seals -- are the same in a and b. */
int wm_sealed_equal(const wm_revision *a, const wm_revision *b);

/* 1 if a claim of `mode` may move from phase `from` to `to` in one record:
 * staying put, or the next phase of the mode's sequence (see
 * wm_claim_phase), or ABORTED while the base is still untouched -- PUT_FIRST
 * before BASE_FENCED, DELETE_FIRST only from CLAIMED (after the base is gone
 * the claim can only go forward). COMMITTED and ABORTED are final. */
int wm_claim_phase_next_ok(int mode, int from, int to);

/* Compare-and-set fence: WM_OK when expected equals current, else
 * WM_ESTALE_GENERATION (the caller saw another state than the one stored). */
int wm_cas_check(uint64_t expected, uint64_t current);

/* Write a formatted sentence into msg (cap bytes) when the caller wants one
 * (msg NULL or cap 0: nothing) and return rc, so that every validation and
 * refusal of the plugin reads `return wm_fail(WM_E..., msg, cap, "...")`. */
int wm_fail(int rc, char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif /* WEIGHT_MANAGEMENT_H */
