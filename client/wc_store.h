/* wc_store.h -- what the parts of libweightclient share behind weightclient.h.
 *
 * The weight_store handle itself (connections, options, the error buffer,
 * the cache of mapped segment files), the call helper that speaks the
 * weight plugin's RPC service (proto/weight_rpc.proto, service 16) and turns
 * a failing reply into the RFC code plus the plugin's message, and the
 * conversions between the public structs and the wire messages. Used by
 * weight_store.c (handle, queries, mutations), weight_put.c (the writer) and
 * the load (weight_get.c and the files of wc_get.h). Not installed, not
 * exported. */
#ifndef WC_STORE_H
#define WC_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "kv_client.h"
#include "rpc_client.h"
#include "seg_map.h"
#include "weight_rpc.pb-c.h"
#include "weightclient.h"

#define WC_WEIGHT_SERVICE 16u
#define WC_DEFAULT_PAYLOAD_BYTES (256ull << 20)
#define WC_DEFAULT_THREADS 4u
#define WC_MAX_THREADS 64u
#define WC_CHECK_CHUNK (1ull << 20) /* payload bytes per XXH3 checksum */
#define WC_SEG_MAPS 8
#define WC_RPC_TIMEOUT_MS 60000
#define WC_KEY_BUF 1025 /* a store key (1024 bytes) and its NUL */

/* The thread and connection that renew a store's revision leases
 * (wc_lease_keeper.c, wc_get.h). */
typedef struct wc_renewer wc_renewer;

/* Drop a reference on r (the store's, at weight_store_close); the last one
 * stops its thread and closes its connection. NULL is ignored. */
void wc_renewer_put(wc_renewer *r);

/* A mapped segment file, shared by the threads of a get (read-only) or the
 * writer (read-write). */
typedef struct wc_seg {
    char path[512];
    seg_map map;
} wc_seg;

struct weight_store {
    char master[512];
    char tenant[WEIGHT_ID_MAX + 1];
    int has_default_policy;
    weight_policy default_policy;
    rpcc_conn *rpc;                  /* the weight service (this thread) */
    wc_renewer *renewer;             /* lease renewals (wc_lease_keeper.c), or NULL */
    kvc *kv;                         /* object service */
    uint64_t payload_bytes;
    unsigned threads;
    int transport;                   /* 0 auto, 1 local, 2 remote */
    uint64_t lease_ttl_ms;
    int release_pages;               /* WEIGHT_OPT_RELEASE_PAGES */
    int attachments;                 /* WEIGHT_OPT_ATTACHMENTS */
    atomic_int cancel;               /* weight_store_cancel */
    weight_progress_fn progress;
    void *progress_ctx;
    weight_file_metadata_fn file_meta;  /* weight_store_set_file_metadata_fn */
    void *file_meta_ctx;
    pthread_mutex_t seg_lock;
    wc_seg segs[WC_SEG_MAPS];
    char err[1024];
    char *token;                     /* weight_store_open_token's; NULL: WEIGHT_TOKEN */
    /* weight_store_open_tls's settings (NULL: the environment's) and the
     * client context built from them once, for node data ports (NULL: the
     * environment's context) */
    char *tls_ca, *tls_cert, *tls_key, *tls_server_name;
    struct ssl_ctx_st *tls_ctx;
};

/* The transport options of the store's connections (its token, its TLS
 * settings). */
static inline rpcc_options wc_rpc_options(const weight_store *s)
{
    rpcc_options o = {.timeout_ms = WC_RPC_TIMEOUT_MS, .token = s->token, .tls_ca = s->tls_ca,
                      .tls_cert = s->tls_cert, .tls_key = s->tls_key,
                      .tls_server_name = s->tls_server_name,
                      .await_restart = 1}; /* a master alone's restart is waited out */
    return o;
}

/* printf the cause of a failure into s->err and return rc. */
int wc_fail(weight_store *s, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* WEIGHT_OK when gen is a generation the caller read; WEIGHT_EINVALID_ARGUMENT
 * naming call for 0 (mutations never read the fence for the caller). */
int wc_require_generation(weight_store *s, const char *call, uint64_t gen);

/* Call method of the weight service on *conn with req; on success unpack
 * the reply with desc into *resp (desc NULL: reply ignored). A failing
 * status is returned as is (the RFC's WM_E* / WEIGHT_E* code) with the
 * plugin's message in s->err; transport failures as WEIGHT_EIO / EAGAIN /
 * EPROTO. A lost connection is replaced (*conn changes) and a call that is
 * safe to repeat is sent once more on the new one. */
int wc_call(weight_store *s,
            rpcc_conn **conn,
            uint32_t method,
            const ProtobufCMessage *req,
            const ProtobufCMessageDescriptor *desc,
            ProtobufCMessage **resp);

/* wc_call with the reply's pieces from alloc (NULL: malloc), e.g. a
 * pb_arena on the caller's stack for a reply read and dropped within the
 * call (pb_arena.h); the caller releases *resp through the same allocator. */
int wc_call_with(weight_store *s,
                 rpcc_conn **conn,
                 uint32_t method,
                 const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *desc,
                 ProtobufCAllocator *alloc,
                 ProtobufCMessage **resp);

/* wc_call, but BUSY -- a change of the same revision or lineage is being
 * made durable, which is over within a sync or two -- is retried for a call
 * that is safe to repeat, with a doubling pause (1 ms, capped at 64 ms),
 * for up to WC_PATIENCE_MS, then BUSY is returned. The bound is time, not
 * attempts: a sync of the master's disk can take a second on a busy
 * machine. */
#define WC_PATIENCE_MS 2000u
int wc_call_patient(weight_store *s,
                    rpcc_conn **conn,
                    uint32_t method,
                    const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *desc,
                    ProtobufCMessage **resp);

/* weight_put_begin; store_default 0 leaves the store's default policy out
 * of a NULL policy (weight_upsert: the target keeps the base's). */
int wc_put_begin(weight_store *s, const weight_identity *id, const weight_policy *policy,
                 int store_default, weight_writer **out);

/* A failed commit of w leaves its import open instead of aborting it (a
 * DELETE_FIRST upsert target: the claim resumes it; its base is gone). */
void wc_writer_keep_open(weight_writer *w);

/* Replace the object-service connection after a transport failure (the
 * transport option carries over). SMP_OK or the connect error. */
int wc_kv_reconnect(weight_store *s);

/* Fill a wire identity from id (strings borrowed from id; an empty tenant
 * becomes the store's). */
void wc_wire_identity(const weight_store *s, const weight_identity *id, Wmrpc__WeightIdentity *w,
                      char *tenant_buf);
void wc_from_wire_identity(const Wmrpc__WeightIdentity *w, weight_identity *out);
void wc_from_wire_metadata(const Wmrpc__WeightMetadata *w, weight_metadata *out);
void wc_from_wire_operation(const Wmrpc__WeightOperation *w, weight_operation *out);

/* The mapping of replica r's segment -- its file, or what its dedicated
 * node's local socket hands over (seg_map_open_at) -- mapped once per store
 * (read-write when writable; a read-only mapping is upgraded on demand).
 * Each call checks the mapping is still of what r names: a node that
 * restarted on a new segment file gets a new mapping (the old one stays
 * mapped, unused, until the store closes). NULL when the file is not on
 * this host, the node refused this process (seg_local.h logs it once), the
 * transport is remote, or every mapping slot is taken (the caller then goes
 * through the node's data server). Thread-safe. */
const seg_map *wc_seg_get(weight_store *s, const kvc_replica *r, int writable);

/* Report progress (rate-limited by the caller). */
void wc_progress(weight_store *s, uint64_t done, uint64_t total);
/* *ts := CLOCK_REALTIME now + ms, for pthread_cond_timedwait: the waits
 * between two progress reports of a transfer's threads. */
void wc_realtime_in_ms(struct timespec *ts, long ms);


#endif /* WC_STORE_H */
