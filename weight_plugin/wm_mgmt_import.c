/* wm_mgmt_import.c -- import and READY publication (RPCs IMPORT_BEGIN,
 * IMPORT_COMMIT, IMPORT_ABORT).
 *
 * An import begins by marking its group managed and persisting an IMPORTING
 * revision; the commit reads the group in bounded pages, checks it against
 * the summary the client sends (payload count, bytes, key and manifest
 * digests, affinity units) and publishes READY + HOT with the sealed summary
 * -- and the first migration toward the preferred residency -- in one
 * durable record; an abort (the RPC, or the tick for an import idle past its
 * TTL) removes what was uploaded and then forgets the revision with a type-9
 * record, so an aborted import never burns its name. Everything goes
 * through the record machinery of wm_mgmt_txn.c. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_lineage.h"
#include "weight_residency_planner.h"
#include "wm_mgmt.h"

/* ------------------------------------------------------------------------ */
/* IMPORT_BEGIN                                                              */
/* ------------------------------------------------------------------------ */

/* The group is managed (durable): now append the IMPORTING record. */
static void wm_begin_managed(void *arg, int status)
{
    wm_txn *t = arg;
    wm_plugin *p = t->p;
    wm_pending_remove(p, t);
    if (status < 0) {
        wm_reply_error(p, t->call, WM_EDURABILITY_FAILED,
                       "could not mark group %s managed (%s); nothing changed", t->group_key,
                       smp_strerror(status));
        wm_txn_free(t);
        return;
    }
    smp_rpc_call *call = t->call;
    wm_submit(p, t, call, WM_REPLY_BEGIN, "import begin");
}

/* Begin an import: validate identity and policy, mark the group managed
 * (durable), then persist the IMPORTING record and answer. The request's
 * policy fields override, field by field, the cluster default -- or, for
 * the target of an open replacement claim (weight_upsert), the base
 * revision's policy (wm_lineage_base_policy): an upsert keeps the base's
 * policy unless the request gives one. Generation 0 is refused
 * INVALID_ARGUMENT (an older master took it). A retry for an identity already
 * IMPORTING answers that revision; any other state is CONFLICT. A new
 * revision past its tenant's max_revisions (auth.limits) is SMP_ENOSPC,
 * before anything is written (wm_tenant_admit_revision). */
int wm_rpc_import_begin(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    int rc;
    wm_identity_buf idb;
    wm_policy pol;
    WM_DECODE(req, Wmrpc__ImportBeginRequest, wmrpc__import_begin_request__unpack, p, call, body,
              len);

    if (!wm_identity_in(p, call, req->identity, &idb)) goto free_req;
    if (idb.id.weight_generation == 0) {
        /* a lineage's watermark 0 means "none committed": a revision of
         * generation 0 could never be told from no revision */
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                       "weight_generation 0: generations start at 1");
        goto free_req;
    }
    if (wm_policy_from_pb(p, req->policy, wm_lineage_base_policy(p, &idb.id), &pol, msg, sizeof(msg)) < 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "invalid policy: %s", msg);
        goto free_req;
    }
    const wm_revision *rev = wm_store_get(p->store, &idb.id);
    if (rev != NULL) {
        if (rev->availability == WM_AVAIL_IMPORTING && !wm_pending_metadata(p, rev->group_key))
            wm_reply_begin(p, call, rev);
        else if (rev->availability == WM_AVAIL_IMPORTING)
            wm_reply_error(p, call, WM_EBUSY, "%s is changing; retry", rev->group_key);
        else
            wm_reply_error(p, call, WM_ECONFLICT,
                           "revision %s already exists and is %s (a new import needs a new "
                           "weight_generation)",
                           rev->group_key, wm_availability_name((int)rev->availability));
        goto free_req;
    }

    if ((rc = wm_lineage_import_check(p, &idb.id, msg, sizeof(msg))) < 0) {
        wm_reply_error(p, call, rc, "%s", msg);
        goto free_req;
    }
    if (!wm_tenant_admit_revision(p, call, idb.id.tenant_id)) goto free_req;
    wm_txn *t = wm_txn_new(p, WM_TXN_UPSERT, "");
    if (t == NULL) {
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        goto free_req;
    }
    wm_revision *r = &t->up.revision;
    r->id = idb.id;
    if (wm_txn_own_ids(t) < 0) { /* it is appended after the group flag, later */
        wm_txn_free(t);
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        goto free_req;
    }
    r->policy = pol;
    r->availability = WM_AVAIL_IMPORTING;
    r->residency = WM_RES_UNKNOWN;
    r->metadata_generation = 1;
    if (wm_revision_bind_keys(r, &t->keys) < 0) {
        wm_txn_free(t);
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                       "the identity's keys exceed %d bytes once percent-encoded", WM_KEY_MAX);
        goto free_req;
    }
    snprintf(t->group_key, sizeof(t->group_key), "%s", r->group_key);
    r->created_ms = r->updated_ms = r->last_access_ms = wm_now(p, NULL);
    if (wm_pending_metadata(p, t->group_key)) {
        wm_reply_error(p, call, WM_EBUSY, "an import of %s is starting; retry", t->group_key);
        wm_txn_free(t);
        goto free_req;
    }
    if ((rc = wm_metadata_mutation_check(NULL, r, msg, sizeof(msg))) < 0) {
        wm_txn_free(t);
        wm_reply_error(p, call, rc, "%s", msg);
        goto free_req;
    }
    /* Hold the revision while the group flag becomes durable. */
    t->call = call;
    t->next = p->pending;
    p->pending = t;
    if ((rc = p->api->group_set_managed(p->host, t->group_key, 1, wm_begin_managed, t)) < 0) {
        wm_pending_remove(p, t);
        wm_txn_free(t);
        wm_reply_append_error(p, call, rc, "import begin (marking the group managed)");
    }
free_req:
    wmrpc__import_begin_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* ------------------------------------------------------------------------ */
/* IMPORT_COMMIT                                                             */
/* ------------------------------------------------------------------------ */

typedef struct wm_member_seen {
    char *key;
    uint64_t size;
    smp_data_type type;
    int complete;
    uint8_t checksum[32];
} wm_member_seen;

typedef struct wm_group_scan {
    wm_member_seen *v;
    size_t n, cap;
    size_t limit;        /* stop after this many (more means extra objects) */
    int oom;
    char last[WM_KEY_MAX + 2];
} wm_group_scan;

static int wm_scan_visit(void *arg, const smp_object_info *o)
{
    wm_group_scan *s = arg;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        wm_member_seen *nv = realloc(s->v, nc * sizeof(*nv));
        if (nv == NULL) {
            s->oom = 1;
            return 1;
        }
        s->v = nv;
        s->cap = nc;
    }
    wm_member_seen *m = &s->v[s->n];
    m->key = strdup(o->key ? o->key : "");
    if (m->key == NULL) {
        s->oom = 1;
        return 1;
    }
    m->size = o->size;
    m->type = o->data_type;
    m->complete = o->complete;
    memcpy(m->checksum, o->checksum, 32);
    snprintf(s->last, sizeof(s->last), "%s", m->key);
    s->n++;
    return s->n >= s->limit ? 1 : 0;
}

static void wm_scan_free(wm_group_scan *s)
{
    for (size_t i = 0; i < s->n; i++) free(s->v[i].key);
    free(s->v);
}

static void wm_hex(const uint8_t *d, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[d[i] >> 4];
        out[2 * i + 1] = hx[d[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Validate the group against the commit request and fill the sealed summary
 * of *r and the affinity *aff (owned by the caller). WM_OK or
 * WM_EINVALID_ARGUMENT with a sentence naming the mismatch. */
static int wm_commit_validate(wm_plugin *p, const Wmrpc__ImportCommitRequest *req, wm_revision *r,
                              wm_affinity *aff, char *msg, size_t cap)
{
    int rc = WM_OK;
    wm_group_scan scan;
    uint64_t *sizes = NULL;
    unsigned char *seen = NULL;
    char **keys = NULL;
    uint64_t count = req->payload_count;
    char hex[65];

    memset(&scan, 0, sizeof(scan));
    if (count == 0 || count > WM_COMMIT_MAX_PAYLOADS) {
        snprintf(msg, cap, "payload_count %" PRIu64 " is outside 1..%u", count, WM_COMMIT_MAX_PAYLOADS);
        return WM_EINVALID_ARGUMENT;
    }
    if (req->manifest_key == NULL || strcmp(req->manifest_key, r->manifest_key) != 0) {
        snprintf(msg, cap, "manifest_key \"%.200s\" is not the revision's canonical manifest key %.200s",
                 req->manifest_key ? req->manifest_key : "", r->manifest_key);
        return WM_EINVALID_ARGUMENT;
    }
    if (req->manifest_sha256.len != WM_SHA256_LEN || req->payload_keys_sha256.len != WM_SHA256_LEN ||
        req->affinity_sha256.len != WM_SHA256_LEN) {
        snprintf(msg, cap, "manifest_sha256, payload_keys_sha256 and affinity_sha256 must be 32 bytes");
        return WM_EINVALID_ARGUMENT;
    }
    if (req->n_units == 0) {
        snprintf(msg, cap, "the affinity summary has no unit");
        return WM_EINVALID_ARGUMENT;
    }
    uint64_t in_group = p->api->group_count(p->host, r->group_key);
    if (in_group != count + 1) {
        snprintf(msg, cap,
                 "group %.200s holds %" PRIu64 " objects; payload_count %" PRIu64
                 " and the manifest make %" PRIu64,
                 r->group_key, in_group, count, count + 1);
        return WM_EINVALID_ARGUMENT;
    }

    /* Read the group in bounded pages. */
    scan.limit = (size_t)count + 2;
    for (;;) {
        size_t before = scan.n;
        size_t page = scan.limit - scan.n < 256 ? scan.limit - scan.n : 256;
        size_t stop = scan.n + page;
        size_t keep_limit = scan.limit;
        scan.limit = stop;
        p->api->group_list(p->host, r->group_key, before ? scan.last : NULL, page, wm_scan_visit,
                           &scan);
        scan.limit = keep_limit;
        if (scan.oom) {
            rc = SMP_ENOMEM;
            goto free_all;
        }
        /* A short page is the end of the group (listing is in key order). */
        if (scan.n - before < page || scan.n >= scan.limit) break;
    }

    sizes = calloc((size_t)count, sizeof(*sizes));
    seen = calloc((size_t)count, 1);
    keys = calloc((size_t)count, sizeof(*keys));
    if (sizes == NULL || seen == NULL || keys == NULL) {
        rc = SMP_ENOMEM;
        goto free_all;
    }
    int manifest_seen = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < scan.n; i++) {
        const wm_member_seen *m = &scan.v[i];
        if (!m->complete) {
            snprintf(msg, cap, "object %.200s in the group is not complete", m->key);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        if (strcmp(m->key, r->manifest_key) == 0) {
            if (m->type != SMP_DATA_METADATA) {
                snprintf(msg, cap, "manifest %.200s is not a METADATA object", m->key);
                rc = WM_EINVALID_ARGUMENT;
                goto free_all;
            }
            if (memcmp(m->checksum, req->manifest_sha256.data, WM_SHA256_LEN) != 0) {
                wm_hex(m->checksum, 32, hex);
                snprintf(msg, cap, "manifest %.200s has SHA-256 %.200s, not the manifest_sha256 committed",
                         m->key, hex);
                rc = WM_EINVALID_ARGUMENT;
                goto free_all;
            }
            manifest_seen = 1;
            continue;
        }
        wm_identity_buf mid;
        wm_key_kind kind;
        uint64_t n = 0;
        if (wm_key_parse(m->key, &mid, &kind, &n) < 0 || kind != WM_KEY_PAYLOAD ||
            wm_identity_cmp(&mid.id, &r->id) != 0 || n >= count) {
            snprintf(msg, cap, "extra object %.200s in group %.200s (not the manifest nor payload 0..%" PRIu64 ")",
                     m->key, r->group_key, count - 1);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        if (m->type != SMP_DATA_WEIGHT) {
            snprintf(msg, cap, "payload %.200s is not a WEIGHT object", m->key);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        seen[n] = 1;
        sizes[n] = m->size;
        bytes += m->size;
    }
    if (!manifest_seen) {
        snprintf(msg, cap, "manifest %.200s is missing from the group", r->manifest_key);
        rc = WM_EINVALID_ARGUMENT;
        goto free_all;
    }
    for (uint64_t n = 0; n < count; n++) {
        char key[WM_KEY_MAX + 1];
        if (wm_payload_key(&r->id, n, key, sizeof(key)) < 0) {
            snprintf(msg, cap, "payload key %" PRIu64 " exceeds the key limit", n);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        if (!seen[n]) {
            snprintf(msg, cap, "payload %.200s is missing from the group", key);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        if ((keys[n] = strdup(key)) == NULL) {
            rc = SMP_ENOMEM;
            goto free_all;
        }
    }
    if (bytes != req->logical_bytes) {
        snprintf(msg, cap, "payloads hold %" PRIu64 " logical bytes, the commit says %" PRIu64, bytes,
                 req->logical_bytes);
        rc = WM_EINVALID_ARGUMENT;
        goto free_all;
    }
    uint8_t digest[WM_SHA256_LEN];
    if ((rc = wm_payload_keys_digest((const char *const *)keys, (size_t)count, digest)) < 0) goto free_all;
    if (memcmp(digest, req->payload_keys_sha256.data, WM_SHA256_LEN) != 0) {
        snprintf(msg, cap, "payload_keys_sha256 does not match the SHA-256 of the sorted payload keys");
        rc = WM_EINVALID_ARGUMENT;
        goto free_all;
    }

    /* The affinity summary: every unit's bytes from its members' sizes. */
    aff->units = calloc(req->n_units, sizeof(*aff->units));
    if (aff->units == NULL) {
        rc = SMP_ENOMEM;
        goto free_all;
    }
    aff->n_units = req->n_units;
    for (size_t u = 0; u < req->n_units; u++) {
        const Wmrpc__AffinityUnit *in = req->units[u];
        wm_affinity_unit *out = &aff->units[u];
        uint64_t ub = 0;
        if (in == NULL || in->n_members == 0) {
            snprintf(msg, cap, "affinity unit %zu has no member", u);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        out->members = calloc(in->n_members, sizeof(char *));
        if (out->members == NULL) {
            rc = SMP_ENOMEM;
            goto free_all;
        }
        out->n_members = in->n_members;
        out->logical_bytes = in->logical_bytes;
        for (size_t j = 0; j < in->n_members; j++) {
            wm_identity_buf mid;
            wm_key_kind kind;
            uint64_t n = 0;
            const char *mk = in->members[j] ? in->members[j] : "";
            if (wm_key_parse(mk, &mid, &kind, &n) < 0 || kind != WM_KEY_PAYLOAD ||
                wm_identity_cmp(&mid.id, &r->id) != 0 || n >= count) {
                snprintf(msg, cap, "affinity unit %zu member \"%.200s\" is not a payload of the revision", u,
                         mk);
                rc = WM_EINVALID_ARGUMENT;
                goto free_all;
            }
            if ((out->members[j] = strdup(mk)) == NULL) {
                rc = SMP_ENOMEM;
                goto free_all;
            }
            ub += sizes[n];
        }
        if (ub != in->logical_bytes) {
            snprintf(msg, cap, "affinity unit %zu says %" PRIu64 " logical bytes, its members hold %" PRIu64,
                     u, in->logical_bytes, ub);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
    }
    memcpy(r->manifest_sha256, req->manifest_sha256.data, WM_SHA256_LEN);
    memcpy(r->payload_keys_sha256, req->payload_keys_sha256.data, WM_SHA256_LEN);
    memcpy(r->affinity_sha256, req->affinity_sha256.data, WM_SHA256_LEN);
    r->payload_count = count;
    r->logical_bytes = bytes;
    r->affinity_count = req->n_units;
    if ((rc = wm_affinity_check(aff, r, msg, cap)) < 0) goto free_all;
free_all:
    if (keys != NULL)
        for (uint64_t n = 0; n < count; n++) free(keys[n]);
    free(keys);
    free(seen);
    free(sizes);
    wm_scan_free(&scan);
    return rc;
}

/* The commit repeats an already sealed summary exactly. */
static int wm_commit_same(const wm_revision *r, const Wmrpc__ImportCommitRequest *req)
{
    return req->payload_count == r->payload_count && req->logical_bytes == r->logical_bytes &&
           req->manifest_sha256.len == WM_SHA256_LEN &&
           memcmp(req->manifest_sha256.data, r->manifest_sha256, WM_SHA256_LEN) == 0 &&
           req->payload_keys_sha256.len == WM_SHA256_LEN &&
           memcmp(req->payload_keys_sha256.data, r->payload_keys_sha256, WM_SHA256_LEN) == 0 &&
           req->affinity_sha256.len == WM_SHA256_LEN &&
           memcmp(req->affinity_sha256.data, r->affinity_sha256, WM_SHA256_LEN) == 0 &&
           req->n_units == r->affinity_count;
}

/* Seal and publish an import: CAS on the IMPORTING revision, validate the
 * group against the summary (wm_commit_validate), then one durable record
 * carries READY + HOT, the sealed summary and affinity, and -- when the
 * preferred residency is not HOT -- the initial MIGRATING operation toward
 * it. A retry on a published revision with the same summary answers it
 * unchanged; a different summary is CONFLICT. A mismatch is
 * INVALID_ARGUMENT naming it and changes nothing. */
int wm_rpc_import_commit(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[768];
    int rc;
    wm_identity_buf idb;
    WM_DECODE(req, Wmrpc__ImportCommitRequest, wmrpc__import_commit_request__unpack, p, call, body,
              len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &idb);
    if (rev == NULL) goto free_req;
    if (rev->availability != WM_AVAIL_IMPORTING) {
        if ((rev->availability == WM_AVAIL_READY || rev->availability == WM_AVAIL_DEGRADED) &&
            wm_commit_same(rev, req))
            wm_reply_metadata(p, call, rev); /* a retry: the committed result */
        else
            wm_reply_error(p, call, WM_ECONFLICT,
                           "revision %s is %s; only an IMPORTING revision can be committed (a "
                           "retry must repeat the committed summary)",
                           rev->group_key, wm_availability_name((int)rev->availability));
        goto free_req;
    }
    if (!wm_check_fence(p, call, rev, req->expected_metadata_generation)) goto free_req;

    wm_txn *t = wm_txn_new(p, WM_TXN_UPSERT, rev->group_key);
    if (t == NULL) {
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        goto free_req;
    }
    wm_revision *r = &t->up.revision;
    *r = *rev;
    msg[0] = '\0';
    if ((rc = wm_commit_validate(p, req, r, &t->up.affinity, msg, sizeof(msg))) < 0) {
        wm_affinity_clear(&t->up.affinity);
        wm_txn_free(t);
        if (rc == SMP_ENOMEM) wm_reply_error(p, call, rc, "out of memory validating the group");
        else wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "commit of %s refused: %s", rev->group_key, msg);
        goto free_req;
    }
    t->owns_affinity = 1;
    t->up.has_affinity = 1;
    uint64_t now = wm_now(p, rev);
    r->availability = WM_AVAIL_READY;
    r->residency = WM_RES_HOT;
    r->observed_hot_ratio = 1.0;
    r->metadata_generation = rev->metadata_generation + 1;
    r->updated_ms = now;
    if (r->policy.preferred != WM_RES_HOT)
        wm_txn_migrating(p, t, r->policy.preferred, r->policy.mixed_hot_ratio);
    wm_check_submit(p, call, rev, t, "commit", "import commit", msg, sizeof(msg));
free_req:
    wmrpc__import_commit_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* ------------------------------------------------------------------------ */
/* IMPORT_ABORT                                                              */
/* ------------------------------------------------------------------------ */

/* The empty group of an aborted import is no longer managed: now the
 * type-9 record that forgets the revision (the caller, if any, is answered
 * from its durable callback with an empty MetadataResponse). */
static void wm_abort_unmanaged(void *arg, int status)
{
    wm_txn *t = arg;
    wm_plugin *p = t->p;
    smp_rpc_call *call = t->call;
    int rc;
    wm_pending_remove(p, t);
    if (status < 0) {
        if (call != NULL)
            wm_reply_error(p, call, WM_EDURABILITY_FAILED,
                           "could not unmanage group %s (%s); the import is still open",
                           t->group_key, smp_strerror(status));
        wm_txn_free(t);
        return;
    }
    if (call != NULL) {
        wm_submit(p, t, call, WM_REPLY_DELETED, "import abort");
        return;
    }
    if ((rc = wm_txn_submit_quiet(p, t)) < 0)
        p->api->log(p->host, SMP_LOG_WARN, "abort of %s not recorded (%s); the next tick retries",
                    t->group_key, wm_status_name(rc));
}

int wm_import_abort_start(wm_plugin *p, const wm_revision *rev, smp_rpc_call *call)
{
    char msg[512];
    int rc;
    uint64_t members = p->api->group_count(p->host, rev->group_key);
    if (members > 0 || wm_lineage_target_open(p, &rev->id)) {
        /* Uploads to remove first (or a claim that must see its target
         * fail): DELETING with its operation; the lifecycle removes them,
         * unmanages the group and then forgets the revision
         * (weight_lifecycle.c). */
        wm_txn *t = call != NULL ? wm_txn_next(p, call, rev) : wm_txn_new(p, WM_TXN_UPSERT, rev->group_key);
        if (t == NULL) return SMP_ENOMEM;
        if (call == NULL) {
            t->up.revision = *rev;
            t->up.revision.metadata_generation = rev->metadata_generation + 1;
            t->up.revision.updated_ms = wm_now(p, rev);
        }
        wm_txn_deleting(p, t, members, 0);
        if (call != NULL) {
            wm_check_submit(p, call, rev, t, "abort", "import abort", msg, sizeof(msg));
            return SMP_OK;
        }
        if ((rc = wm_metadata_mutation_check(rev, &t->up.revision, msg, sizeof(msg))) < 0) {
            p->api->log(p->host, SMP_LOG_ERROR, "abort of %s refused: %s", rev->group_key, msg);
            wm_txn_free(t);
            return rc;
        }
        if ((rc = wm_txn_submit_quiet(p, t)) < 0) return rc;
        return SMP_OK;
    }
    /* Nothing uploaded: unmanage the group, then forget the revision. */
    wm_txn *t = wm_txn_new(p, WM_TXN_DELETE, rev->group_key);
    if (t == NULL) {
        if (call != NULL) wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        return SMP_ENOMEM;
    }
    t->del.id = rev->id;
    if (wm_txn_own_ids(t) < 0) { /* it is appended after the group flag, later */
        wm_txn_free(t);
        if (call != NULL) wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        return SMP_ENOMEM;
    }
    t->del.metadata_generation = rev->metadata_generation;
    t->del.reason = WM_DEL_IMPORT_ABORTED;
    t->call = call;
    t->next = p->pending; /* the revision is busy meanwhile */
    p->pending = t;
    if ((rc = p->api->group_set_managed(p->host, rev->group_key, 0, wm_abort_unmanaged, t)) < 0) {
        wm_pending_remove(p, t);
        wm_txn_free(t);
        if (call != NULL) wm_reply_append_error(p, call, rc, "import abort (unmanaging the group)");
        return rc;
    }
    return SMP_OK;
}

/* Abort an import. Nothing uploaded: the group is unmanaged and a type-9
 * record forgets the revision (answered with an empty MetadataResponse);
 * the identity is free again at once. Uploads present: DELETING with a
 * DELETING operation the lifecycle runs (members removed with
 * remove_object, the group unmanaged), which ends by forgetting the
 * revision the same way -- a failed or aborted import never burns its
 * name; a new begin of the identity works once the abort has finished. A
 * retry on a DELETING revision answers it as it is; once forgotten it is
 * NOT_FOUND. */
int wm_rpc_import_abort(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    int rc;
    wm_identity_buf idb;
    WM_DECODE(req, Wmrpc__IdentityRequest, wmrpc__identity_request__unpack, p, call, body, len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &idb);
    if (rev == NULL) goto free_req;
    if (rev->availability == WM_AVAIL_DELETING || rev->availability == WM_AVAIL_DELETED) {
        wm_reply_metadata(p, call, rev);
        goto free_req;
    }
    if (rev->availability != WM_AVAIL_IMPORTING) {
        wm_reply_error(p, call, WM_ECONFLICT, "revision %s is %s; only an import can be aborted",
                       rev->group_key, wm_availability_name((int)rev->availability));
        goto free_req;
    }
    if ((rc = wm_lineage_abort_check(p, &idb.id, msg, sizeof(msg))) < 0) {
        wm_reply_error(p, call, rc, "%s", msg);
        goto free_req;
    }
    if (!wm_check_fence(p, call, rev, req->expected_metadata_generation)) goto free_req;
    wm_import_abort_start(p, rev, call);
free_req:
    wmrpc__identity_request__free_unpacked(req, NULL);
    return SMP_OK;
}
