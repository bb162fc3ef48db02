/* weightclient.h -- libweightclient, the one way an application touches
 * model weights in a weight_mgmt Store Master.
 *
 * A weight revision is a complete, immutable set of tensors named by a
 * five-part identity (tenant, namespace, resource, revision, generation).
 * This header is the whole public surface: a weight_store handle on a
 * master, the writer of weight_put (tensors, pre-sharded fragments, tied
 * aliases; published atomically at commit), weight_get (lease-protected
 * load with resharding straight into the caller's buffers), and the
 * management calls of the RFC (exists, metadata, size, list, policy,
 * migrate, operation, remove). Manifest keys, payload packing and transfer
 * plans are internal and never exposed.
 *
 * Errors: every call returns 0 or a negative code -- the RFC's codes
 * (WEIGHT_E*: INVALID_ARGUMENT, NOT_FOUND, ...), WEIGHT_EDIGEST_MISMATCH
 * when stored bytes do not match their recorded digest, or a transport /
 * store code (WEIGHT_EIO, ...). weight_error_name() names a code as the RFC
 * does; weight_store_last_error() holds a sentence naming the cause of the
 * store's last failure. A weight_store is used by one thread at a time
 * (open one per thread); weight_get and the writer's commit use a few
 * internal threads. A store outlives master restarts and failovers: a lost
 * connection is replaced on the next call, and calls that are safe to
 * repeat (queries, lease calls, begin and commit of an import) are sent
 * once more; other mutations then fail with WEIGHT_EIO and may be retried
 * by the caller (their generation fence makes a repeat safe to judge).
 * A call that a master alone refuses because it is stopping (nothing of it
 * applied) waits for the master to come back at the same endpoint and is
 * sent again there, within the call's 60 s; a call that meets a closed
 * connection before its request left goes again too. */
#ifndef WEIGHTCLIENT_H
#define WEIGHTCLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(WEIGHTCLIENT_BUILD)
#define WEIGHT_API __attribute__((visibility("default")))
#else
#define WEIGHT_API
#endif

/* -- errors ------------------------------------------------------------------ */

enum {
    WEIGHT_OK = 0,
    /* Transport and store codes (the host's SMP_E* values). */
    WEIGHT_EINVAL = -1,
    WEIGHT_ENOMEM = -2,
    WEIGHT_EIO = -8,
    WEIGHT_EAGAIN = -10,
    WEIGHT_EPROTO = -13,
    WEIGHT_ENOSPC = -15,      /* no memory segment has room for an object of the import */
    WEIGHT_ECANCELED = -17,
    WEIGHT_EAUTH = -18,       /* no token, or a token the master does not know */
    WEIGHT_EFORBIDDEN = -19,  /* the token's role does not allow the call */
    /* The RFC's codes. */
    WEIGHT_EINVALID_ARGUMENT = -101,
    WEIGHT_ENOT_FOUND = -102,
    WEIGHT_ENOT_READY = -103,
    WEIGHT_ECONFLICT = -104,
    WEIGHT_ESTALE_GENERATION = -105,
    WEIGHT_EBUSY = -106,
    WEIGHT_ELEASE_EXPIRED = -107,
    WEIGHT_EDURABILITY_FAILED = -108,
    WEIGHT_EPOLICY_UNSATISFIABLE = -109,
    /* Client-side: a manifest or payload does not match its digest. */
    WEIGHT_EDIGEST_MISMATCH = -150
};

/* "STALE_GENERATION", "DIGEST_MISMATCH", "IO", ...; never NULL. */
WEIGHT_API const char *weight_error_name(int rc);

/* -- identity, states, policy ------------------------------------------------ */

#define WEIGHT_ID_MAX 256 /* bytes of one identity string (UTF-8) */

typedef struct weight_identity {
    char tenant_id[WEIGHT_ID_MAX + 1];     /* "": the store's tenant */
    char namespace_id[WEIGHT_ID_MAX + 1];
    char resource_id[WEIGHT_ID_MAX + 1];
    char revision[WEIGHT_ID_MAX + 1];
    uint64_t generation;
} weight_identity;

/* Fill *out from strings (tenant may be NULL or ""). WEIGHT_OK, or
 * WEIGHT_EINVALID_ARGUMENT for a NULL, empty or over-long component. */
WEIGHT_API int weight_identity_set(weight_identity *out,
                                   const char *tenant_id,
                                   const char *namespace_id,
                                   const char *resource_id,
                                   const char *revision,
                                   uint64_t generation);

/* Parse the command-line form NAMESPACE/RESOURCE/REVISION[@GENERATION]
 * (components percent-encoded where they hold '/', '@' or '%'). Without
 * "@GENERATION", *has_generation (may be NULL) is 0 and generation 0.
 * tenant may be NULL. WEIGHT_OK or WEIGHT_EINVALID_ARGUMENT. */
WEIGHT_API int weight_identity_parse(const char *text,
                                     const char *tenant,
                                     weight_identity *out,
                                     int *has_generation);

/* The inverse: write NAMESPACE/RESOURCE/REVISION@GENERATION into out (cap
 * bytes). Returns its length, or WEIGHT_EINVALID_ARGUMENT if it does not fit. */
WEIGHT_API int weight_identity_format(const weight_identity *id, char *out, size_t cap);

typedef enum weight_availability {
    WEIGHT_IMPORTING = 1,
    WEIGHT_READY = 2,
    WEIGHT_DEGRADED = 3,
    WEIGHT_DELETING = 4,
    WEIGHT_DELETED = 5
} weight_availability;

typedef enum weight_residency {
    WEIGHT_RES_UNKNOWN = 0,
    WEIGHT_RES_HOT = 1,
    WEIGHT_RES_COLD = 2,
    WEIGHT_RES_MIXED = 3,
    WEIGHT_RES_ABSENT = 4
} weight_residency;

typedef enum weight_migration_mode {
    WEIGHT_MODE_DEFAULT = 0,    /* in a policy: not given (the next level decides) */
    WEIGHT_MODE_PINNED = 1,
    WEIGHT_MODE_MANUAL = 2,
    WEIGHT_MODE_AUTO = 3
} weight_migration_mode;

/* A storage policy. In a request, a zero field means "not given": the next
 * level of the RFC's precedence (call > store default > cluster default)
 * decides. In metadata every field is set. */
typedef struct weight_policy {
    weight_residency preferred;     /* HOT, COLD, MIXED; UNKNOWN: not given */
    double mixed_hot_ratio;         /* in (0, 1); 0: not given */
    weight_migration_mode mode;
} weight_policy;

/* RFC names ("READY", "MIXED", "AUTO", "MIGRATING", "RUNNING"); "?" else. */
WEIGHT_API const char *weight_availability_name(int v);
WEIGHT_API const char *weight_residency_name(int v);
WEIGHT_API const char *weight_mode_name(int v);
WEIGHT_API const char *weight_operation_kind_name(int v);
WEIGHT_API const char *weight_operation_state_name(int v);

/* Lightweight revision metadata (never the manifest body). */
typedef struct weight_metadata {
    weight_identity identity;
    weight_policy policy;                 /* persisted, fully resolved */
    weight_availability availability;
    weight_residency residency;           /* observed */
    double observed_hot_ratio;
    uint64_t metadata_generation;         /* the CAS fence of mutations */
    uint64_t operation_id;                /* active operation, 0: none */
    char manifest_key[1025];              /* the manifest reference */
    uint8_t manifest_sha256[32];
    uint64_t payload_count;
    uint64_t logical_bytes;
    uint64_t affinity_count;
    uint64_t created_ms;
    uint64_t updated_ms;
    uint64_t last_access_ms;
    uint32_t active_leases;
} weight_metadata;

typedef struct weight_operation {
    uint64_t id;
    weight_identity identity;
    int kind;                             /* 1 MIGRATING, 2 REPAIRING, 3 DELETING, 4 IMPORTING */
    weight_residency target;
    double target_hot_ratio;
    int state;                            /* 1 RUNNING, 2 SUCCEEDED, 3 FAILED */
    uint64_t members_done;
    uint64_t members_total;
    uint64_t bytes_done;
    uint64_t bytes_total;
    char error[256];
    uint32_t attempts;
    uint64_t created_ms;
    uint64_t updated_ms;
} weight_operation;

/* -- the store handle -------------------------------------------------------- */

typedef struct weight_store weight_store;

/* Connect to the master at `master` ("host:port", or a Unix socket path),
 * or to the leader of an HA cluster given as a comma-separated list of its
 * masters ("m1:7600,m2:7600,m3:7600", up to 16, 511 bytes in all): the
 * store connects to the first that answers and follows a standby's answer
 * to the leader; after a lost connection it goes on with the next master
 * of the list, and sends a call again only when it may be repeated (a
 * query, an idempotent step; the others fail with WEIGHT_EIO). A master
 * that stops answering (paused, hung) is passed over: a new connection
 * must answer within 2 s, and a call that has waited 2 s asks another
 * master whether it still leads -- when another does, a call that may be
 * repeated goes there and the others fail WEIGHT_EIO (whether they were
 * applied is not known); a call that timed out leaves that master for the
 * next one. A bad list
 * is WEIGHT_EINVALID_ARGUMENT with err naming the bad item. tenant: the tenant of identities that leave theirs empty (NULL or "":
 * "default"). default_policy: the store's default (NULL: none; the cluster
 * default applies). On failure *out is NULL and err (may be NULL) names the
 * cause. WEIGHT_OK, WEIGHT_EINVALID_ARGUMENT, WEIGHT_EIO, WEIGHT_ENOMEM. */
WEIGHT_API int weight_store_open(const char *master,
                                 const char *tenant,
                                 const weight_policy *default_policy,
                                 weight_store **out,
                                 char *err,
                                 size_t errlen);

/* weight_store_open presenting token on every connection to the master
 * (NULL: the environment's WEIGHT_TOKEN when set, which weight_store_open
 * also presents; "": none). With the master's authentication on, the token
 * decides the tenant and role of every call, and tenant NULL or "" is the
 * token's tenant. A refused token is WEIGHT_EAUTH, err naming the cause. */
WEIGHT_API int weight_store_open_token(const char *master,
                                       const char *tenant,
                                       const char *token,
                                       const weight_policy *default_policy,
                                       weight_store **out,
                                       char *err,
                                       size_t errlen);

/* Close the connections and unmap segments. NULL is a no-op. */
WEIGHT_API void weight_store_close(weight_store *s);

/* The message of the last failed call on s ("" if none). */
WEIGHT_API const char *weight_store_last_error(const weight_store *s);

/* Tuning, each returning WEIGHT_OK or WEIGHT_EINVALID_ARGUMENT:
 *  PAYLOAD_BYTES  bound of one payload object written by weight_put
 *                 (default 256 MiB, at least 4096);
 *  THREADS        transfer threads of weight_get (default min(4, cores), 1..64);
 *  TRANSPORT      0 auto (map co-located segments, TCP otherwise),
 *                 1 local only, 2 remote (TCP) only;
 *  LEASE_TTL_MS   lease TTL weight_get asks for (0: the server's);
 *  RELEASE_PAGES  0 (default) or 1: weight_get gives back the pages of each
 *                 checked window once it is copied -- of a co-located
 *                 segment mapping, and of the destination buffers, which
 *                 must then be MAP_SHARED mappings, of files or anonymous
 *                 (their bytes stay in the page cache or shared memory; a
 *                 private or heap buffer would lose them). For loads streamed into
 *                 files (weightctl get): resident memory stays about a
 *                 window per transfer thread instead of the model;
 *  ATTACHMENTS    0 (default) or 1: weight_get offers the revision's
 *                 attachments (weight_writer_add_attachment) to the placement
 *                 and bindings too, as U8 tensors of one dimension with
 *                 weight_tensor_info.attachment 1 (place them REPLICATED or
 *                 SKIP); at 0 they are skipped, and weight_get_mapped never
 *                 lists them. */
typedef enum weight_option {
    WEIGHT_OPT_PAYLOAD_BYTES = 1,
    WEIGHT_OPT_THREADS = 2,
    WEIGHT_OPT_TRANSPORT = 3,
    WEIGHT_OPT_LEASE_TTL_MS = 4,
    WEIGHT_OPT_RELEASE_PAGES = 5,
    WEIGHT_OPT_ATTACHMENTS = 6
} weight_option;
WEIGHT_API int weight_store_set_option(weight_store *s, weight_option opt, uint64_t value);

/* Progress of weight_put / weight_get: bytes done of total so far. Called
 * on the calling thread, at most every few milliseconds; NULL: none. */
typedef void (*weight_progress_fn)(void *ctx, uint64_t done, uint64_t total);
WEIGHT_API void weight_store_set_progress(weight_store *s, weight_progress_fn fn, void *ctx);

/* -- weight_put: the writer -------------------------------------------------- */

typedef struct weight_writer weight_writer;

/* Begin publishing revision id (an empty tenant is the store's). policy:
 * NULL for the store's default (or the cluster's). The revision exists as
 * IMPORTING (invisible) until commit. Errors: the RFC's (CONFLICT when the
 * identity exists in another state, INVALID_ARGUMENT, ...). */
WEIGHT_API int weight_put_begin(weight_store *s,
                                const weight_identity *id,
                                const weight_policy *policy,
                                weight_writer **out);

/* Add a whole tensor: dtype is the safetensors name ("BF16", "F8_E4M3",
 * ...), shape has ndim entries (0: a scalar), data holds
 * product(shape) * item size bytes row-major. data is borrowed until
 * weight_writer_commit returns (no copy is made). */
WEIGHT_API int weight_writer_add_tensor(weight_writer *w,
                                        const char *name,
                                        const char *dtype,
                                        uint32_t ndim,
                                        const uint64_t *shape,
                                        const void *data);

/* Add one fragment of a tensor already sharded (e.g. one TP rank's shard):
 * the global shape, the fragment's global offset and local shape (ndim
 * entries each), data row-major of the local shape. Every fragment of one
 * name must give the same dtype and global shape; together they must cover
 * the tensor exactly (checked at commit). data is borrowed until commit. */
WEIGHT_API int weight_writer_add_fragment(weight_writer *w,
                                          const char *name,
                                          const char *dtype,
                                          uint32_t ndim,
                                          const uint64_t *global_shape,
                                          const uint64_t *global_offset,
                                          const uint64_t *local_shape,
                                          const void *data);

/* Add an attachment: a small file of the model directory (config.json,
 * tokenizer files, generation_config.json, ...) stored in the revision with
 * its tensors -- in its payload objects, verified like them, immutable once
 * READY. name is the file's name (no '/', not "." or ".."; unique among
 * tensors and attachments), at most WEIGHT_ATTACHMENT_MAX_BYTES bytes
 * (INVALID_ARGUMENT naming it and its size above). data is borrowed until
 * commit. A revision with attachments has a manifest of format 2, which
 * readers older than this call refuse. weight_get hands them out only with
 * WEIGHT_OPT_ATTACHMENTS. */
#define WEIGHT_ATTACHMENT_MAX_BYTES (64ull << 20)
WEIGHT_API int weight_writer_add_attachment(weight_writer *w,
                                            const char *name,
                                            const void *data,
                                            uint64_t bytes);

/* Add one pair of the safetensors __metadata__ of the files the revision is
 * published from (e.g. "format" = "pt"): kept in its manifest and handed to
 * the file-metadata callback of every weight_get (weightctl get writes the
 * pairs back into its files). key is non-empty and unique in the revision;
 * key and value are valid UTF-8; a revision keeps at most 1024 pairs of
 * 1 MiB in all (checked at commit). INVALID_ARGUMENT naming the key. Both
 * strings are copied. Readers older than this call ignore the pairs. */
WEIGHT_API int weight_writer_add_file_metadata(weight_writer *w,
                                               const char *key,
                                               const char *value);

/* Declare `name` a tied weight sharing `target`'s storage (same dtype and
 * shape; stored once). target must be added (now or later) and not itself
 * an alias. */
WEIGHT_API int weight_writer_alias(weight_writer *w, const char *name, const char *target);

/* Write every payload object, then the manifest last, then commit: the
 * revision is READY (first HOT) when this returns 0, and *out (may be NULL)
 * holds its metadata. The writer is freed whatever happens; on failure the
 * import is aborted (nothing is published) and the error says why. */
WEIGHT_API int weight_writer_commit(weight_writer *w, weight_metadata *out);

/* Abort the import (nothing is published) and free the writer. NULL: no-op. */
WEIGHT_API void weight_writer_abort(weight_writer *w);

/* -- weight_get -------------------------------------------------------------- */

/* A tensor of the revision, as a placement or binding callback sees it. */
typedef struct weight_tensor_info {
    const char *name;
    const char *dtype;          /* safetensors name */
    uint32_t item_size;
    uint32_t ndim;
    const uint64_t *shape;      /* global shape */
    const char *alias_of;       /* the storage tensor of a tied weight, or NULL */
    /* Below: since attachments. */
    int attachment;             /* 1: an attachment (a file, U8 [bytes]); only
                                   offered with WEIGHT_OPT_ATTACHMENTS */
} weight_tensor_info;

typedef enum weight_place_kind {
    WEIGHT_PLACE_SKIP = 0,          /* not loaded */
    WEIGHT_PLACE_REPLICATED = 1,    /* the whole tensor */
    WEIGHT_PLACE_SPLIT = 2          /* part `rank` of `parts` along `dim` */
} weight_place_kind;

/* One tensor's target layout. A dimension of size S split in N parts gives
 * part r S / N elements, plus one for the first S % N parts. */
typedef struct weight_tensor_place {
    weight_place_kind kind;
    uint32_t dim;
    uint32_t parts;
    uint32_t rank;
} weight_tensor_place;

/* Called by weight_get once per pair of the revision's file metadata
 * (weight_writer_add_file_metadata), in key order, after the manifest is
 * verified and before the first placement; the strings live until the
 * callback returns. A negative return aborts the get with that code. */
typedef int (*weight_file_metadata_fn)(void *ctx, const char *key, const char *value);
/* Set (or with NULL clear) the file-metadata callback of the gets on s. */
WEIGHT_API void weight_store_set_file_metadata_fn(weight_store *s,
                                                  weight_file_metadata_fn fn,
                                                  void *ctx);

/* The placement of a get: a callback deciding per tensor (NULL: every
 * tensor replicated). A negative return aborts the get with that code. */
typedef struct weight_placement {
    int (*place)(void *ctx, const weight_tensor_info *t, weight_tensor_place *out);
    void *ctx;
} weight_placement;

/* A caller buffer for one tensor: exactly the rank's box, row-major. */
typedef struct weight_binding {
    const char *name;
    void *data;
    uint64_t bytes;             /* capacity; must be >= the box's bytes */
} weight_binding;

/* Where the bytes go: buffers by tensor name, and/or a callback asked for
 * each placed tensor without a buffer in the list (local_shape: the box's
 * shape, bytes its size; *out a buffer of at least bytes bytes that stays
 * the caller's). A placed tensor with neither is INVALID_ARGUMENT. */
typedef struct weight_bindings {
    const weight_binding *buffers;
    size_t n_buffers;
    int (*provide)(void *ctx,
                   const weight_tensor_info *t,
                   const weight_tensor_place *p,
                   const uint64_t *local_shape,
                   uint64_t bytes,
                   void **out);
    void *ctx;
} weight_bindings;

/* What a get did (may be NULL in the call). */
typedef struct weight_get_stats {
    uint64_t bytes;             /* bytes written into the buffers */
    uint64_t tensors;           /* tensors placed */
    uint64_t objects;           /* payload objects read */
    uint64_t local_bytes;       /* of bytes: copied from mapped segments */
    uint64_t verified_bytes;    /* payload bytes checked against the manifest */
    uint64_t ticket_refreshes;  /* fresh READ tickets asked of the master after a node
                                   refused an expired one (a load slower than
                                   node.ticket_ttl_ms) */
    uint64_t prefaulted_bytes;  /* of local_bytes' sources: bytes (whole pages) whose
                                   page tables this get populated in the store's
                                   mapping of a segment; 0 when an earlier get
                                   through the same mapping already had (the
                                   store keeps its mappings until it is closed or
                                   the node's segment file is replaced or grows) */
} weight_get_stats;

/* Load revision id into the caller's buffers under a revision lease
 * (renewed while the load runs; released on every path). The manifest is
 * verified (SHA-256 and identity) before anything is planned: a mismatch is
 * WEIGHT_EDIGEST_MISMATCH with nothing written. Every payload chunk a get
 * reads is verified (the manifest's XXH3-64 of each 1 MiB chunk, over the
 * whole chunk, whatever part of it is copied) before the get returns
 * success. The check is fused into the copy: a chunk's bytes are scattered
 * block by block and each block is hashed right after, while in cache, so
 * a chunk's bytes reach the buffers before its sum is compared. A memory
 * replica that fails a read or a checksum is replaced by the object's cold
 * replica when it has one (its bytes overwrite the failed chunk's);
 * otherwise a mismatch is WEIGHT_EDIGEST_MISMATCH naming the object and
 * chunk, and the buffers must not be used: they may hold unverified bytes
 * of that chunk besides verified bytes of others. (An object without chunk
 * sums is checked whole against its SHA-256 before any of it is copied.) A node read whose READ ticket expired (a load slower than
 * the master's node.ticket_ttl_ms) asks the master for fresh tickets and
 * goes on from the refused window, a bounded number of times per object
 * (stats->ticket_refreshes counts them); a forged or wrong-range ticket, or
 * any other refusal, is never retried. A lease refused with BUSY
 * (a change of the revision's metadata is being made durable) is asked for
 * again for up to 2 s before BUSY is returned. Errors: NOT_FOUND,
 * NOT_READY (not READY/readable), LEASE_EXPIRED, INVALID_ARGUMENT (a bad
 * placement or binding), DIGEST_MISMATCH, BUSY, IO. */
WEIGHT_API int weight_get(weight_store *s,
                          const weight_identity *id,
                          const weight_placement *placement,
                          const weight_bindings *bindings,
                          weight_get_stats *stats);

/* Cancel the weight_get or weight_writer_commit running on s (or, if none
 * runs, the next one): a get stops at the next chunk, releases its lease and
 * returns WEIGHT_ECANCELED (buffers may hold part of the revision); a commit
 * stops at the next piece it copies, aborts its import (what it wrote is
 * removed, the identity can be published again at once) and returns
 * WEIGHT_ECANCELED. The one call that may be made from any thread, and from
 * a signal handler (it only sets a lock-free flag). */
WEIGHT_API void weight_store_cancel(weight_store *s);

/* -- weight_get_mapped: zero-copy views of a co-located HOT revision ---------- */

/* A revision held for reading in place: its lease and, per tensor, a
 * pointer to the whole tensor, row-major, inside a read-only mapping of the
 * segment file that holds it on this host. Nothing is copied. The leases of
 * a store's views and gets are renewed by one thread of the store on one
 * connection of its own, however many views are held or taken in turn. The
 * view does not use its store after weight_get_mapped returns: the store
 * may be closed (the renewing thread and connection stay until the last
 * view is released), or used by its thread for other calls, while the view
 * lives. The mappings are
 * shared by the views of the process and kept mapped after the last view
 * is released (mapping a segment again would cost a page-table fill per
 * load); one whose file is removed or replaced is unmapped when the next
 * view is made.
 *
 * A view fails closed. Once its lease is lost -- a renewal refused (the
 * revision was replaced or deleted), or none got through by four fifths of
 * the TTL after the last one was sent (the master may end the lease at the
 * TTL and put other objects in its ranges) -- the renewer makes the pages
 * of the view's objects inaccessible in this process before the master can
 * reuse them: a read through a pointer the view handed out then faults
 * (SIGSEGV) instead of returning another revision's bytes, and
 * weight_mapped_status, _data and _verify return the lost code. Pages that
 * an object of another live view of the process also lies on stay readable
 * while that view lives: a view of the same revision through another store
 * keeps them with its lease; a page a neighbouring revision's object shares
 * at an end (objects are placed at 64-byte granularity) is replaced by a
 * private copy, so the lost view still reads its own bytes there (never
 * another revision's). A view taken later maps the segment anew.
 * Without WEIGHT_OPT_LEASE_TTL_MS a view asks for a 30 s TTL. */
typedef struct weight_mapped weight_mapped;

typedef struct weight_mapped_tensor {
    const char *name;
    const char *dtype;          /* safetensors name */
    uint32_t item_size;
    uint32_t ndim;
    const uint64_t *shape;      /* global shape */
    const char *alias_of;       /* the storage tensor of a tied weight, or NULL */
    uint64_t bytes;             /* product(shape) * item_size */
} weight_mapped_tensor;

/* Acquire a lease on revision id, read and verify its manifest (as
 * weight_get does) and find, for each payload object holding a tensor
 * stored as one fragment, a memory replica in a segment file this process
 * can map. *out holds the lease until weight_mapped_release. Errors: those
 * of weight_get (NOT_FOUND, NOT_READY, BUSY, DIGEST_MISMATCH for the
 * manifest, IO, ENOMEM). */
WEIGHT_API int weight_get_mapped(weight_store *s, const weight_identity *id, weight_mapped **out);

/* The number of tensors of the revision (aliases included). */
WEIGHT_API size_t weight_mapped_count(const weight_mapped *v);

/* Tensor i (0 <= i < count) of v; the strings and shape belong to v.
 * WEIGHT_OK or WEIGHT_EINVALID_ARGUMENT. */
WEIGHT_API int weight_mapped_get_tensor(const weight_mapped *v, size_t i, weight_mapped_tensor *out);

/* *data: tensor i in place, read-only, valid until weight_mapped_release;
 * or NULL when it cannot be read in place -- stored in several fragments,
 * empty, no memory replica on this host (COLD, another node, a remote
 * transport), or its payload object failed verification -- read those with
 * weight_get. The first call for a payload object verifies the whole object
 * against the manifest's chunk checksums, so no unverified byte is handed
 * out. Thread-safe. WEIGHT_OK, WEIGHT_EINVALID_ARGUMENT, or the code the
 * lease was lost with (LEASE_EXPIRED, ...: the view is fenced, *data NULL;
 * a loss while the first call verifies the object faults it). */
WEIGHT_API int weight_mapped_data(weight_mapped *v, size_t i, const void **data);

/* Verify now the payload objects behind tensors[0..n) of v (every tensor
 * when tensors is NULL) that are readable in place and not verified yet,
 * on up to the store's WEIGHT_OPT_THREADS threads, the caller's among
 * them: a loader about to take many tensors in place calls it once, and
 * the weight_mapped_data calls that follow find their objects verified
 * instead of hashing them one after another on the caller's thread. An
 * object that fails is recorded as weight_mapped_data records it (its
 * tensors' data is NULL). Thread-safe; weight_mapped_data waits for it.
 * WEIGHT_OK; WEIGHT_EINVALID_ARGUMENT (v NULL, or an index not below
 * weight_mapped_count: nothing is verified); WEIGHT_ENOMEM (nothing is
 * verified, weight_mapped_data still verifies on first use); the code the
 * lease was lost with (the view is fenced: nothing is verified). */
WEIGHT_API int weight_mapped_verify(weight_mapped *v, const size_t *tensors, size_t n);

/* WEIGHT_OK while the lease holds; the code its renewal failed with
 * (LEASE_EXPIRED, ...) once the master dropped it or it could not be
 * renewed in time -- the view is then fenced (see weight_mapped): its
 * pointers fault, and a caller that keeps them polls this per request. */
WEIGHT_API int weight_mapped_status(const weight_mapped *v);

/* Release the lease and free v: every pointer it handed out is invalid
 * afterwards. NULL is a no-op. May be called from any thread. */
WEIGHT_API void weight_mapped_release(weight_mapped *v);

/* -- management -------------------------------------------------------------- */

/* *exists = 1 only when the exact revision is READY and readable; 0 for
 * an absent one, also for another tenant's (which the master answers
 * NOT_FOUND: to this connection it does not exist). */
WEIGHT_API int weight_is_exist(weight_store *s, const weight_identity *id, int *exists);

/* Metadata of a revision (tombstones included). op (may be NULL) receives
 * the active operation when there is one (op->id 0 otherwise). */
WEIGHT_API int weight_get_metadata(weight_store *s,
                                   const weight_identity *id,
                                   weight_metadata *out,
                                   weight_operation *op);

/* What a revision's metadata says beyond weight_metadata, which is
 * allocated by callers and so cannot grow. The caller sets struct_size to
 * sizeof(weight_metadata_more) as it was built; fields are only appended,
 * and the library writes those it knows within struct_size (zeroing any
 * newer ones it does not). */
typedef struct weight_metadata_more {
    uint32_t struct_size;
    /* A DEGRADED revision's place: where it goes back (HOT, COLD or MIXED
     * and MIXED's hot ratio) once its members are readable again -- the
     * target of the operation it was lost in, or its residency then, or
     * the preferred residency of a policy changed since. UNKNOWN and 0 for
     * any other availability, and from a master that does not keep it. */
    weight_residency degraded_from;
    double degraded_from_hot_ratio;
    /* Fields above: the first version. New fields go below this line. */
} weight_metadata_more;

/* weight_get_metadata, and into more (may be NULL) what weight_metadata has
 * no room for. A more whose struct_size is below the first version's is
 * WEIGHT_EINVALID_ARGUMENT and nothing is asked. */
WEIGHT_API int weight_get_metadata_more(weight_store *s,
                                        const weight_identity *id,
                                        weight_metadata *out,
                                        weight_operation *op,
                                        weight_metadata_more *more);

/* The logical payload bytes validated at commit. */
WEIGHT_API int weight_get_size(weight_store *s, const weight_identity *id, uint64_t *bytes);

/* One page of revisions of the store's tenant, optionally of one namespace
 * (and resource). page_token: "" or NULL for the first page; next_token
 * (cap bytes) receives the next ("" at the end). *out is malloc'd (free with
 * weight_list_free), *n entries. limit 0: the server's default. */
typedef struct weight_list_query {
    const char *namespace_id;       /* NULL or "": any */
    const char *resource_id;        /* NULL or "": any (needs namespace_id) */
    uint32_t limit;
    int include_deleted;            /* flags: WEIGHT_LIST_DELETED (1, what
                                       it always meant: tombstones too) |
                                       WEIGHT_LIST_IMPORTING (imports not
                                       committed: a put in progress, or one
                                       that died; weight_abort_import). Flags,
                                       not a field more: a caller built
                                       against an older header passes the
                                       shorter struct */
} weight_list_query;
#define WEIGHT_LIST_DELETED 1
#define WEIGHT_LIST_IMPORTING 2
WEIGHT_API int weight_list(weight_store *s,
                           const weight_list_query *q,
                           const char *page_token,
                           weight_metadata **out,
                           size_t *n,
                           char *next_token,
                           size_t next_cap);
WEIGHT_API void weight_list_free(weight_metadata *list);

/* Replace the policy (fields 0 keep the current value), fenced by
 * expected_metadata_generation: the generation the caller read (required:
 * 0 is INVALID_ARGUMENT, no call reads it for you). *out (may be NULL) gets
 * the updated metadata. STALE_GENERATION when it moved. */
WEIGHT_API int weight_update_policy(weight_store *s,
                                    const weight_identity *id,
                                    const weight_policy *policy,
                                    uint64_t expected_metadata_generation,
                                    weight_metadata *out);

/* Start an explicit residency migration toward target (HOT, COLD, MIXED;
 * mixed_hot_ratio 0: the policy's), fenced like weight_update_policy.
 * *op gets the created operation. */
WEIGHT_API int weight_migrate(weight_store *s,
                              const weight_identity *id,
                              weight_residency target,
                              double mixed_hot_ratio,
                              uint64_t expected_metadata_generation,
                              weight_operation *op);

WEIGHT_API int weight_get_operation(weight_store *s, uint64_t operation_id, weight_operation *op);

/* Start a repair: a REPAIRING operation that restores the replicas the
 * revision's recorded residency needs (memory from cold, cold from memory)
 * and brings a DEGRADED revision back to READY when every member is
 * readable again. The master starts one by itself when it sees a member
 * lose a replica; this asks for it now. READY or DEGRADED revisions only
 * (NOT_READY), BUSY while an operation is active. expected_metadata_generation
 * is required (0 is INVALID_ARGUMENT): the caller says which state it read.
 * *op (may be NULL) gets the created operation. */
WEIGHT_API int weight_repair(weight_store *s,
                             const weight_identity *id,
                             uint64_t expected_metadata_generation,
                             weight_operation *op);

/* Delete the whole revision (payloads in batches, the manifest last) and
 * keep a queryable tombstone. BUSY while a lease or an operation is active.
 * Fenced like weight_update_policy (0 is INVALID_ARGUMENT). *out (may be
 * NULL) gets the metadata after the call (DELETING or DELETED). */
WEIGHT_API int weight_remove(weight_store *s,
                             const weight_identity *id,
                             uint64_t expected_metadata_generation,
                             weight_metadata *out);

/* Abort an import that was never committed (a put whose writer died: kill,
 * crash, ENOSPC) and free what it wrote. IMPORTING revisions only: CONFLICT
 * otherwise (a DELETING or DELETED one is answered as it is, a retry of an
 * abort); CONFLICT too for the target of an open upsert claim the master
 * cannot abort safely (the message says why). Fenced like weight_remove on
 * the IMPORTING revision's metadata generation (0 is INVALID_ARGUMENT); a
 * live writer of that import fails at its next call. *out (may be NULL) gets
 * the metadata after the call: DELETING while its objects are removed (then
 * the revision is forgotten), or all zero when it had written nothing and is
 * forgotten at once. The identity is free for a new put once forgotten. */
WEIGHT_API int weight_abort_import(weight_store *s,
                                   const weight_identity *id,
                                   uint64_t expected_metadata_generation,
                                   weight_metadata *out);

/* -- weight_upsert: generation replacement ----------------------------------- */

typedef enum weight_upsert_mode {
    WEIGHT_UPSERT_PUT_FIRST = 1,     /* default: target READY before the base goes */
    WEIGHT_UPSERT_DELETE_FIRST = 2   /* capacity: base deleted before the target import */
} weight_upsert_mode;

/* Phases of a claim (the master's wm_claim_phase values). PUT_FIRST walks
 * CLAIMED, IMPORTING_TARGET, BASE_FENCED, DRAINING_BASE, DELETING_BASE,
 * COMMITTED; DELETE_FIRST walks CLAIMED, DELETING_BASE, BASE_DELETED,
 * IMPORTING_TARGET, COMMITTED. ABORTED ends a PUT_FIRST claim whose target
 * failed before READY (the base is intact). */
enum {
    WEIGHT_PHASE_CLAIMED = 1,
    WEIGHT_PHASE_IMPORTING_TARGET = 2,
    WEIGHT_PHASE_BASE_FENCED = 3,
    WEIGHT_PHASE_DRAINING_BASE = 4,
    WEIGHT_PHASE_DELETING_BASE = 5,
    WEIGHT_PHASE_BASE_DELETED = 6,
    WEIGHT_PHASE_COMMITTED = 7,
    WEIGHT_PHASE_ABORTED = 8
};

/* "CLAIMED", ..., "?" outside the range. */
WEIGHT_API const char *weight_upsert_phase_name(int phase);

/* A lineage's replacement claim as the master holds it. A claim is not the
 * serving head: it says which replacement is in progress, nothing more. */
typedef struct weight_upsert_claim {
    char request_id[129];
    weight_identity base;
    weight_identity target;
    weight_upsert_mode mode;
    int phase;
    uint64_t expected_metadata_generation;  /* of the base */
    uint64_t committed_watermark;           /* the lineage's */
    char error[256];                        /* why an ABORTED claim ended */
    uint64_t created_ms;
    uint64_t updated_ms;
} weight_upsert_claim;

/* weight_upsert: replace revision `replacing` by generation
 * target_generation of the same lineage (above the base and the lineage's
 * committed watermark). The claim is made durable first; then, when the
 * target still has to be written, *out is a writer for it (same calls as
 * weight_put: add tensors, then weight_writer_commit publishes it READY).
 * *out is NULL when there is nothing to write (the target is READY already:
 * a retry of a request that got past its import). *claim (may be NULL) is
 * the claim as the master answered it.
 *
 * mode 0 is PUT_FIRST: the base stays readable until the target is READY;
 * then the master retires it (no new leases or renewals), waits for its
 * leases to drain, deletes it and commits the watermark -- after commit
 * returns, asynchronously (follow it with weight_upsert_status). A target
 * failure aborts the claim and leaves the base intact. DELETE_FIRST needs a
 * base without leases or operations (BUSY before any side effect), deletes
 * it and only then hands out the writer; this call waits (up to
 * wait_ms, 0: 120 s) for the deletion. A failed DELETE_FIRST commit keeps
 * the target import open, so a retry of the same request resumes it (the
 * base cannot come back; the master refuses to abort that import, so
 * weight_writer_abort only frees such a writer).
 *
 * policy: the target's (NULL: the target keeps the base's policy; the
 * store's default policy does not apply to an upsert).
 *
 * request_id NULL derives one from the base and target identities, mode and
 * expected generation, so a retry after a lost reply is the same request;
 * the same request returns the existing claim or resumes it; BUSY from
 * the master (a step of the claim is being made durable) is asked again for
 * up to 2 s, then returned. Another request while a claim is open:
 * CONFLICT. expected_metadata_generation: the base's generation the caller
 * read (required: 0 is INVALID_ARGUMENT). Errors: the RFC's (NOT_FOUND,
 * NOT_READY, STALE_GENERATION, CONFLICT, BUSY, ...); CONFLICT also for a
 * request whose claim was ABORTED (its error says why; use a new
 * request id); SMP_EGATE (-12) in HA mode while
 * weight_lineage_oplog_capability_confirmed is not set. */
WEIGHT_API int weight_upsert(weight_store *s,
                             const weight_identity *replacing,
                             uint64_t target_generation,
                             weight_upsert_mode mode,
                             const char *request_id,
                             uint64_t expected_metadata_generation,
                             const weight_policy *policy,
                             uint64_t wait_ms,
                             weight_upsert_claim *claim,
                             weight_writer **out);

/* The current or last claim of the lineage of id (its generation is
 * ignored). NOT_FOUND when the lineage never had one. */
WEIGHT_API int weight_upsert_status(weight_store *s,
                                    const weight_identity *id,
                                    weight_upsert_claim *claim);

/* -- idempotent management calls (issue 17) ----------------------------------- */

/* weight_update_policy, weight_migrate and weight_remove with a request id
 * (NULL or "": none, as the calls above): 1..128 bytes of UTF-8 the caller
 * picks once per intended change and repeats on every retry of it. When the
 * first call's reply was lost, the retry -- same arguments, same
 * expected_metadata_generation, same id -- answers the first result instead
 * of STALE_GENERATION; the same id with other arguments is CONFLICT. The
 * master remembers the last request that changed each revision (persisted
 * with its record, so also across restarts and failovers); a retry after
 * another change of the revision meets the generation fence as usual.
 * expected_metadata_generation is required (0 is INVALID_ARGUMENT): a retry
 * passes the generation the first call used. */
WEIGHT_API int weight_update_policy_request(weight_store *s,
                                            const weight_identity *id,
                                            const weight_policy *policy,
                                            uint64_t expected_metadata_generation,
                                            const char *request_id,
                                            weight_metadata *out);
WEIGHT_API int weight_migrate_request(weight_store *s,
                                      const weight_identity *id,
                                      weight_residency target,
                                      double mixed_hot_ratio,
                                      uint64_t expected_metadata_generation,
                                      const char *request_id,
                                      weight_operation *op);
WEIGHT_API int weight_remove_request(weight_store *s,
                                     const weight_identity *id,
                                     uint64_t expected_metadata_generation,
                                     const char *request_id,
                                     weight_metadata *out);

/* -- TLS settings of a store handle ------------------------------------------ */

/* Where a store's TLS 1.3 trust and identity come from (weight_store_open_tls).
 * Strings are borrowed for the call (the store keeps copies).
 *  ca           the CA bundle (PEM) the master's and the nodes' certificates
 *               must chain to. NULL or "": the environment's WM_TLS_CA,
 *               WM_TLS_CERT and WM_TLS_KEY, as weight_store_open (then cert
 *               and key here must be unset too);
 *  cert, key    a client certificate (PEM chain) and its private key, for a
 *               master or node that verifies clients; both or neither;
 *  server_name  the name the master's certificate must carry (a DNS name or
 *               an IP address), when the endpoint dialled is not that name
 *               (an IP address, a tunnel); NULL or "": the host of each
 *               endpoint of the master list. Nodes' certificates are always
 *               checked against the address each node advertises.
 * The store dials TLS to a TCP master when a CA is known (here or in the
 * environment), and to every node whose data port speaks TLS; a Unix socket
 * and a co-located segment stay plain. */
typedef struct weight_tls_options {
    uint32_t struct_size;       /* sizeof(weight_tls_options) as the caller was built */
    const char *ca;
    const char *cert;
    const char *key;
    const char *server_name;
    /* Fields above: the first version. New fields go below this line. */
} weight_tls_options;

/* weight_store_open_token with the TLS settings tls (NULL: the environment,
 * exactly as weight_store_open_token). The files are read and checked
 * before anything connects: a missing or unreadable file, a CA that is not
 * PEM, a certificate without its key (or one that does not match it), a
 * certificate without a CA, a struct_size below the first version's, or a
 * server_name over 255 bytes is WEIGHT_EINVALID_ARGUMENT with err naming the
 * field, the file and the cause, and no connection is made. A master whose
 * certificate is not trusted or does not carry the name is WEIGHT_EIO, err
 * saying so. Every later connection of the store (a reconnect, a failover,
 * lease renewals, node data ports) uses the same settings. */
WEIGHT_API int weight_store_open_tls(const char *master,
                                     const char *tenant,
                                     const char *token,
                                     const weight_tls_options *tls,
                                     const weight_policy *default_policy,
                                     weight_store **out,
                                     char *err,
                                     size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* WEIGHTCLIENT_H */
