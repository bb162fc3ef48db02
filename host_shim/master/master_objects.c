/* master_objects.c -- the host's object service (RPC service 1).
 *
 * Plain object storage that works with or without plugins: put start (soft
 * state, answered at once; a large put's answered once its PUT_HANDOFF is
 * durable, see record_put_open), put end / revoke / remove / remove by prefix
 * (each answered only after its OpLog record is durable and applied, through
 * master_commit), replica lookup under a read lease (a lookup that finds
 * nothing to read is reported to plugins as SMP_EVENT_READ_MISS), exists and listing
 * (reads of the applied state). A reader gives its read leases back with
 * release_read_leases; those of a connection that closes end with it
 * (read_lease.h). Setting a group's managed flag is refused:
 * only the plugin that owns a group does that (host API group_set_managed). A request that does not
 * decode is answered SMP_EPROTO; every refusal carries a message naming the
 * key and the cause.
 *
 * Tenants (with authentication on, rpc_auth.h): a caller other than an admin
 * names only keys of its own namespace, "<tenant>/..." and the weight
 * plugin's "weights/<tenant>/..."; any other key is answered as absent
 * (NOT_FOUND, exists false), a put outside it is refused naming the rule,
 * its puts carry its tenant whatever the request says, and its listing
 * shows only objects of its tenant. An admin names any key.
 *
 * Key spaces (ABI 1.9, claim_key_space): after the tenant rule, a change in
 * a prefix a plugin claimed is refused for every caller, an admin too, with
 * SMP_EVETO naming the key, the prefix and the plugin -- a put start or put
 * end unless the put is into a group that plugin owns (its guard decides
 * those, as before), and a remove of one key of such a group (the group's
 * own protection would refuse it too; this names the key space). An object
 * there in no group of the plugin's -- put before the claim, or while the
 * plugin was not loaded -- is nobody's: it is removed as any other, one key
 * or by prefix, which is how an operator clears it. Reads and put revoke
 * are not refused. While the plugin is disabled its key space stays
 * refused, saying so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ha_election.h"
#include "host_rpc.pb-c.h"
#include "master_internal.h"
#include "node_ticket.h"
#include "pb_arena.h"
#include "read_lease.h"

/* Replies up to this size are packed on the stack. */
#define REPLY_STACK_BYTES 512

void master_reply_msg(smp_rpc_call *call, const ProtobufCMessage *msg)
{
    uint8_t small[REPLY_STACK_BYTES];
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = len <= sizeof(small) ? small : malloc(len);
    if (buf == NULL) {
        rpc_reply_error(call, SMP_ENOMEM, "out of memory packing the reply");
        return;
    }
    protobuf_c_message_pack(msg, buf);
    rpc_reply(call, SMP_OK, buf, len);
    if (buf != small) free(buf);
}

static void reply_err(smp_rpc_call *call, int rc, const char *what, const char *key)
{
    char msg[1400];
    snprintf(msg, sizeof(msg), "%s '%.1024s': %s", what, key ? key : "", smp_strerror(rc));
    rpc_reply_error(call, rc, msg);
}

/* reply_err for a call on key; a refusal of a plugin's guard (SMP_EVETO)
 * also names the group and the plugin that manages the object, so the
 * caller knows to go through that plugin (a weight revision is removed
 * with weight_delete, not object by object). */
static void reply_key_err(master *m, smp_rpc_call *call, int rc, const char *what, const char *key)
{
    char msg[1700];
    smp_object_info info = {.struct_size = sizeof(info)};
    const char *owner = NULL;
    if (rc == SMP_EVETO && key != NULL && obj_object_info(master_objs(m), key, &info) == SMP_OK &&
        info.group != NULL && info.group[0] != '\0')
        owner = obj_group_owner(master_objs(m), info.group);
    if (owner == NULL) {
        reply_err(call, rc, what, key);
        return;
    }
    snprintf(msg, sizeof(msg), "%s '%.1024s': %s: the object belongs to group '%.300s', which "
             "plugin %.64s manages: change it through that plugin's calls", what, key,
             smp_strerror(rc), info.group, owner);
    rpc_reply_error(call, rc, msg);
}

/* A put start refused for room: what was needed, what is free (for the
 * tenant: nodes dedicated to others and nodes down do not count), and which
 * setting to raise; when every node up is dedicated to other tenants, that
 * (no setting helps); EAGAIN instead when no node is up at all. */
static void reply_no_room(master *m, smp_rpc_call *call, const char *key, const char *tenant,
                          uint64_t size)
{
    char msg[1700];   /* the longest key, tenant and figures: 1677 bytes */
    uint64_t used = 0, cap = 0;
    uint64_t need = (size ? size : 1);
    need = (need + OBJ_ALIGN - 1) / OBJ_ALIGN * OBJ_ALIGN;
    char others[300] = "", down[80] = "";
    size_t excluded = master_nodes_closed_to(m, tenant), n_down = master_nodes_down(m);
    if (master_nodes_up(m) == 0) {
        /* not a lack of room: nothing is up to place it on (segments of
         * nodes that are down, or not back since the start, take nothing) */
        if (n_down > 0)
            snprintf(down, sizeof(down), " (%zu node(s) down)", n_down);
        snprintf(msg, sizeof(msg), "put start '%.1024s': %s: no node is up to place it on%s; "
                 "retry once one registers again", key, smp_strerror(SMP_EAGAIN), down);
        rpc_reply_error(call, SMP_EAGAIN, msg);
        return;
    }
    if (excluded > 0 && master_nodes_open_up(m, tenant) == 0) {
        /* no room will help: every node up is another tenant's */
        snprintf(msg, sizeof(msg), "put start '%.1024s': %s: no node that is up takes objects of "
                 "tenant '%.128s': the %zu node(s) up are dedicated to other tenants; start a "
                 "shared node, or one dedicated to '%.128s' (store_node --tenant)", key,
                 smp_strerror(SMP_ENOSPC), tenant, master_nodes_up(m), tenant);
        rpc_reply_error(call, SMP_ENOSPC, msg);
        return;
    }
    obj_memory_usage(master_objs(m), &used, &cap);
    if (excluded > 0)
        snprintf(others, sizeof(others), " open to tenant '%.128s' (%zu node(s) dedicated to other "
                 "tenants excluded)", tenant, excluded);
    if (n_down > 0)
        snprintf(down, sizeof(down), " on a node that is up (%zu node(s) down excluded)", n_down);
    /* The shortfall too: rounded for a person, need and largest may read
       alike ("96.0 MiB needed, the largest free range is 96.0 MiB"). */
    uint64_t largest = obj_memory_largest_free(master_objs(m), tenant);
    snprintf(msg, sizeof(msg),
             "put start '%.1024s': %s: no memory segment has room: %llu bytes needed, the largest "
             "free range%s is %llu bytes%s, %llu bytes short (%llu bytes free in all, of %llu bytes "
             "on %zu nodes); raise node.segment_bytes (the segment grows at the node's next "
             "start) or delete or migrate revisions to COLD",
             key, smp_strerror(SMP_ENOSPC), (unsigned long long)need, down,
             (unsigned long long)largest, others,
             (unsigned long long)(need > largest ? need - largest : 0),
             (unsigned long long)(cap - used), (unsigned long long)cap, master_nodes_up(m));
    rpc_reply_error(call, SMP_ENOSPC, msg);
}

/* Decode the request body into var, its pieces from a stack arena (see
 * pb_arena.h); DECODED_FREE releases what did not fit. */
#define DECODE(type, fn, var, body, len, call)                          \
    uint8_t var##_mem[PB_ARENA_SMALL];                                  \
    pb_arena var##_arena;                                               \
    pb_arena_init(&var##_arena, var##_mem, sizeof(var##_mem));          \
    type *var = fn##__unpack(&var##_arena.alloc, len, body);            \
    if (var == NULL) {                                                  \
        rpc_reply_error(call, SMP_EPROTO, "request body does not decode as " #type); \
        return SMP_OK;                                                  \
    }
#define DECODED_FREE(var) pb_arena_free_unpacked(&var##_arena, &(var)->base)

/* Decode a KeyRequest body into *var, by hand (master_key_request.c);
 * DECODED_KEY_FREE releases it. */
#define DECODE_KEY(var, body, len, call)                                 \
    master_key_req var##_dec;                                            \
    master_key_req *var = &var##_dec;                                    \
    int var##_rc = master_key_req_decode(var, body, len);                \
    if (var##_rc != 0) {                                                 \
        master_key_req_free(var);                                        \
        rpc_reply_error(call, var##_rc == SMP_ENOMEM ? SMP_ENOMEM : SMP_EPROTO, \
                        var##_rc == SMP_ENOMEM ? "out of memory decoding the request" \
                                               : "request body does not decode as KeyRequest"); \
        return SMP_OK;                                                   \
    }
#define DECODED_KEY_FREE(var) master_key_req_free(var)

/* -- tenants ---------------------------------------------------------------- */

/* The tenant the caller of call is confined to; NULL for an admin, and for
 * everyone while authentication is off. */
static const char *confined_tenant(const smp_rpc_call *call)
{
    smp_caller who = {.struct_size = sizeof(who)};
    if (rpc_server_call_caller(call, &who) < 0 || !who.auth_enabled || who.tenant == NULL ||
        who.role == SMP_ROLE_ADMIN)
        return NULL;
    return who.tenant;
}

/* 1 when key lies in tenant's namespace: "<tenant>/..." or "weights/<tenant>/..." */
static int key_in_tenant(const char *key, const char *tenant)
{
    size_t n = strlen(tenant);
    if (key == NULL) return 0;
    if (strncmp(key, "weights/", 8) == 0) key += 8;
    return strncmp(key, tenant, n) == 0 && key[n] == '/';
}

/* 1 when the caller of call may name key; else 0 with it answered as absent. */
static int key_visible(smp_rpc_call *call, const char *key, const char *what)
{
    const char *t = confined_tenant(call);
    if (t == NULL || key_in_tenant(key, t)) return 1;
    reply_err(call, SMP_ENOTFOUND, what, key);
    return 0;
}

/* -- key spaces (ABI 1.9) ---------------------------------------------------- */

/* Answer call SMP_EVETO: the change `what` of key is refused because key
 * lies in the key space ks (its prefix and plugin named, and that the
 * plugin is disabled when it is). */
static void reply_key_space(smp_rpc_call *call, const char *what, const char *key,
                            const host_key_space *ks)
{
    char msg[2700];
    if (ks->disabled)
        snprintf(msg, sizeof(msg), "%s: %s: key '%.1024s' is in the key space '%.1024s' of plugin "
                 "%.64s, which is disabled: refused until `weightctl plugin enable %.64s`, then "
                 "change it through that plugin's calls", what, smp_strerror(SMP_EVETO), key,
                 ks->prefix, ks->plugin, ks->plugin);
    else
        snprintf(msg, sizeof(msg), "%s: %s: key '%.1024s' is in the key space '%.1024s' of plugin "
                 "%.64s: change it through that plugin's calls", what, smp_strerror(SMP_EVETO),
                 key, ks->prefix, ks->plugin);
    rpc_reply_error(call, SMP_EVETO, msg);
}

/* Whether a client's change `what` of key is refused for a key space: 1
 * when key lies in a prefix a plugin claimed (the refusal answered on
 * call), 0 when the request goes on. group is the group a put names (or its
 * in-flight put named; NULL or "": none). A put into a group the
 * claiming plugin owns goes on while that plugin is not disabled: its guard
 * decides which keys may join the group (SMP_GUARD_PUT_INTO_GROUP,
 * SMP_GUARD_UPSERT_INTO_GROUP). */
static int key_space_refused(master *m, smp_rpc_call *call, const char *what, const char *key,
                             const char *group)
{
    host_key_space ks;
    if (!host_plugins_key_space_of(m->plugins, key, &ks)) return 0;
    if (!ks.disabled && group != NULL && group[0] != '\0') {
        const char *owner = obj_group_owner(master_objs(m), group);
        if (owner != NULL && strcmp(owner, ks.plugin) == 0) return 0;
    }
    reply_key_space(call, what, key, &ks);
    return 1;
}

/* 1 when key lies in a key space a plugin claimed. */
static int key_claimed(master *m, const char *key)
{
    host_key_space ks;
    return host_plugins_key_space_of(m->plugins, key, &ks);
}

/* -- put -------------------------------------------------------------------- */

/* The answer of a put start held until its PUT_HANDOFF is durable. */
typedef struct put_open_ctx {
    smp_rpc_call *call;
    char *key;
    char *segment;
    uint64_t offset;
    uint64_t length;
    uint8_t *resp; /* the packed PutStartResponse */
    size_t resp_len;
} put_open_ctx;

/* Give back the range of the put of key just started, whose caller is told
 * it failed: no writer was given the range (a PUT_REVOKE). */
static void give_back_put(master *m, const char *key)
{
    obj_record rec = {0};
    if (obj_prepare_put_revoke(master_objs(m), key, &rec) == SMP_OK)
        master_commit(m, &rec, NULL, NULL, NULL);
}

static void on_put_open_durable(master *m, void *arg, int status, uint64_t seq)
{
    put_open_ctx *c = arg;
    PutStartResponse *resp = NULL;
    (void)seq;
    if (status < 0) {
        give_back_put(m, c->key);
        rpc_reply_error(c->call, status, "put start: the OpLog record of the put did not "
                        "become durable");
    }
    else if ((resp = put_start_response__unpack(NULL, c->resp_len, c->resp)) == NULL ||
             master_scrub_reply(m, c->call, c->segment, c->offset, c->length, &resp->base) < 0)
        rpc_reply_error(c->call, SMP_ENOMEM, "put start: out of memory");
    if (resp != NULL) put_start_response__free_unpacked(resp, NULL);
    free(c->key);
    free(c->segment);
    free(c->resp);
    free(c);
}

/* What a gate on a record every master must replay says in the log. */
typedef struct feature_gate {
    unsigned feature; /* HA_FEATURE_* */
    const char *what; /* "<what> [not ]<done>" */
    const char *done;
    const char *record;
    const char *risk; /* what follows when it is not done */
} feature_gate;

/* 1 when every registered master advertises g's feature (alone: 1). When
 * that changed since *off last said, the log says so once: not done (why,
 * and the risk), or done again. */
static int gate_open(master *m, const feature_gate *g, int *off)
{
    char why[200];
    int ok = master_ha_all_have(m, g->feature, why, sizeof(why));
    if (ok == !*off) return ok;
    *off = !ok;
    if (ok)
        fprintf(stderr, "store_master: %s %s again (%s)\n", g->what, g->done, g->record);
    else
        fprintf(stderr, "store_master: %s not %s (%s): %s\n", g->what, g->done, why, g->risk);
    return ok;
}

/* 1 when the start of a put of size bytes is recorded before it is
 * answered: a large put (OBJ_ZONE_PUT_MAX or more: its writer copies long
 * enough that a master which crashed meanwhile may be replaced before the
 * copy ends; a smaller one is placed in a write zone, whose record serves
 * many puts), on a master every registered master of its cluster can
 * replay the record on (HA), or alone. */
static int put_open_recorded(master *m, uint64_t size)
{
    static const feature_gate g = {
        HA_FEATURE_PUT_HANDOFF, "the starts of puts of 1 MiB or more are", "recorded",
        "PUT_HANDOFF", "a master that replaces this one after a crash does not know their ranges"};
    return size >= OBJ_ZONE_PUT_MAX && gate_open(m, &g, &m->put_open_unrecorded);
}

void master_zones_gate(master *m)
{
    static const feature_gate g = {
        HA_FEATURE_WRITE_ZONES, "puts under 1 MiB are", "placed in write zones", "WRITE_ZONES",
        "a master that replaces this one after a crash may give their ranges to other puts "
        "while their writers copy"};
    /* asked again once the registry was read again (a copy of it is too
     * dear for every put start) */
    uint64_t read = m->election != NULL ? ha_election_members_read(m->election) : 0;
    if (m->zones_gate_asked && read == m->zones_gate_read) return;
    m->zones_gate_asked = 1;
    m->zones_gate_read = read;
    obj_zones_enable(master_objs(m), gate_open(m, &g, &m->zones_off));
}

/* Append rec (a record that makes the put of key just started known: its
 * PUT_HANDOFF, or its write zone's WRITE_ZONES; taken, freed on failure)
 * and answer call with resp once it is durable (on_put_open_durable; the
 * put is given back if it is not). SMP_OK, or an error (call not answered,
 * the put still in flight). */
static int record_put_open(master *m, smp_rpc_call *call, const char *key, obj_record *rec,
                           const obj_put_ticket *t, const ProtobufCMessage *resp)
{
    put_open_ctx *c = calloc(1, sizeof(*c));
    size_t n = protobuf_c_message_get_packed_size(resp);
    int rc = SMP_ENOMEM;
    if (c == NULL || (c->key = strdup(key)) == NULL || (c->segment = strdup(t->segment)) == NULL ||
        (c->resp = malloc(n ? n : 1)) == NULL)
        goto fail;
    c->resp_len = protobuf_c_message_pack(resp, c->resp);
    c->call = call;
    c->offset = t->offset;
    c->length = t->length;
    if ((rc = master_commit(m, rec, NULL, on_put_open_durable, c)) < 0) goto fail;
    return SMP_OK;
fail:
    obj_record_free(rec);
    if (c != NULL) {
        free(c->key);
        free(c->segment);
        free(c->resp);
        free(c);
    }
    return rc;
}

static int h_put_start(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    DECODE(PutStartRequest, put_start_request, req, body, len, call);
    const char *tenant = confined_tenant(call);
    if (tenant != NULL && (!key_in_tenant(req->key, tenant) ||
                           (req->tenant[0] != '\0' && strcmp(req->tenant, tenant) != 0))) {
        char msg[1400];
        snprintf(msg, sizeof(msg), "put start '%.512s': tenant %.128s may only put keys "
                 "beginning with '%.128s/' or 'weights/%.128s/', of its own tenant", req->key,
                 tenant, tenant, tenant);
        rpc_reply_error(call, SMP_EFORBIDDEN, msg);
        DECODED_FREE(req);
        return SMP_OK;
    }
    if (key_space_refused(m, call, "put start", req->key, req->group)) {
        DECODED_FREE(req);
        return SMP_OK;
    }
    obj_put_params p = {
        .key = req->key,
        .size = req->size,
        .data_type = (smp_data_type)req->data_type,
        .group = req->group,
        .tenant = tenant != NULL ? tenant : req->tenant,
        .overwrite = req->overwrite,
        .owner = rpc_server_call_conn(call), /* a draining master's admission asks */
    };
    obj_put_ticket t;
    uint8_t ticket[TICKET_MAX_BYTES];
    size_t ticket_len = 0;
    uint64_t now = master_now_ms();
    int rc = SMP_EBUSY;
    master_zones_gate(m);
    if (!master_key_pending(m, req->key)) {
        /* placed on a node that registered: one still waited for would
         * fail its ticket (master_node_place_ok) */
        m->placing_put = 1;
        rc = obj_put_start(master_objs(m), &p, now, &t);
        m->placing_put = 0;
    }
    if (rc == SMP_ENOSPC && master_nodes_waiting(m, now) &&
        master_node_wait_park(m, call, body, len)) {
        DECODED_FREE(req); /* run again when a node registers */
        return SMP_OK;
    }
    if (rc == SMP_ENOSPC) m->pressure = 1; /* the timer plans an eviction */
    master_ticket_req tr = {.op = TICKET_OP_WRITE, .node = t.node, .segment = t.segment,
                            .offset = t.offset, .length = t.length, .key = req->key,
                            .tenant = req->tenant};
    if (rc == SMP_OK && (rc = master_mint_ticket(m, &tr, ticket, sizeof(ticket), &ticket_len)) < 0) {
        give_back_put(m, req->key); /* the node of the range is not serving */
    }
    if (rc == SMP_ENOSPC) {
        reply_no_room(m, call, req->key, p.tenant, req->size);
    } else if (rc < 0) {
        reply_key_err(m, call, rc, "put start", req->key);
    } else {
        ReplicaLocation loc = REPLICA_LOCATION__INIT;
        ReplicaLocation *locs[1] = {&loc};
        loc.kind = SMP_REPLICA_MEMORY;
        loc.node = (char *)t.node;
        loc.segment = (char *)t.segment;
        loc.offset = t.offset;
        loc.length = t.length;
        loc.status = OBJ_REPLICA_PENDING;
        loc.data_addr = (char *)master_node_data_addr(m, t.node);
        master_node_locate(m, t.node, p.tenant, m->cfg->auth_enabled, &loc);
        loc.data_tls = master_node_data_tls(m, t.node);
        loc.ticket.data = ticket;
        loc.ticket.len = ticket_len;
        PutStartResponse resp = PUT_START_RESPONSE__INIT;
        resp.n_replicas = 1;
        resp.replicas = locs;
        obj_record rec = {0};
        int recorded = put_open_recorded(m, req->size);
        if (recorded || t.zone_wait) {
            rc = recorded ? obj_prepare_put_open(master_objs(m), req->key, &rec)
                          : obj_prepare_write_zones(master_objs(m), t.segment, 0, &rec);
            if (rc == SMP_OK) rc = record_put_open(m, call, req->key, &rec, &t, &resp.base);
            if (rc < 0) {
                give_back_put(m, req->key);
                reply_key_err(m, call, rc, "put start", req->key);
            }
        } else if (master_scrub_reply(m, call, t.segment, t.offset, t.length, &resp.base) < 0) {
            /* bytes of a freed replica still being zeroed there: answer after */
            rpc_reply_error(call, SMP_ENOMEM, "put start: out of memory");
        }
    }
    DECODED_FREE(req);
    return SMP_OK;
}

static void on_put_end_durable(master *m, void *arg, int status, uint64_t seq)
{
    smp_rpc_call *call = arg;
    (void)m;
    if (status < 0) {
        rpc_reply_error(call, status, "put end: the OpLog record did not become durable");
        return;
    }
    PutEndResponse resp = PUT_END_RESPONSE__INIT;
    resp.seq = seq;
    master_reply_msg(call, &resp.base);
}

/* After a put end is applied, tell the plugins the object completed. */
typedef struct put_end_ctx {
    smp_rpc_call *call;
    char *key;
} put_end_ctx;

static void on_put_end_applied(master *m, void *arg, int status, uint64_t seq)
{
    put_end_ctx *c = arg;
    if (status == SMP_OK) {
        smp_object_info info = {.struct_size = sizeof(info)};
        if (obj_object_info(master_objs(m), c->key, &info) == SMP_OK) {
            smp_event ev = {.struct_size = sizeof(ev),
                            .type = SMP_EVENT_OBJECT_COMPLETED,
                            .key = c->key,
                            .group = info.group,
                            .size = info.size};
            master_emit(m, &ev);
        }
    }
    on_put_end_durable(m, c->call, status, seq);
    free(c->key);
    free(c);
}

static int h_put_end(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    obj_record rec = {0};
    put_end_ctx *c = NULL;
    int rc;
    DECODE(PutEndRequest, put_end_request, req, body, len, call);
    if (!key_visible(call, req->key, "put end")) goto free_req;
    if (key_claimed(m, req->key)) { /* the put's group, looked up only then */
        const char *put_group = obj_put_group(master_objs(m), req->key);
        if (put_group != NULL && key_space_refused(m, call, "put end", req->key, put_group))
            goto free_req;
    }
    if (req->sha256.len != 32) {
        rc = SMP_EINVAL;
        rpc_reply_error(call, rc, "put end: sha256 must be 32 bytes");
        goto free_req;
    }
    if ((rc = obj_prepare_put_end(master_objs(m), req->key, req->sha256.data, master_wall_ms(), &rec)) < 0)
        goto refuse;
    c = calloc(1, sizeof(*c));
    if (c == NULL || (c->key = strdup(req->key)) == NULL) {
        rc = SMP_ENOMEM;
        obj_record_free(&rec);
        goto refuse;
    }
    c->call = call;
    if ((rc = master_commit(m, &rec, req->key, on_put_end_applied, c)) < 0) goto refuse;
    c = NULL;
    goto free_req;
refuse:
    if (c) free(c->key);
    free(c);
    reply_key_err(m, call, rc, "put end", req->key);
free_req:
    DECODED_FREE(req);
    return SMP_OK;
}

static void on_empty_durable(master *m, void *arg, int status, uint64_t seq)
{
    smp_rpc_call *call = arg;
    (void)m;
    (void)seq;
    if (status < 0) {
        rpc_reply_error(call, status, "the OpLog record did not become durable");
        return;
    }
    rpc_reply(call, SMP_OK, NULL, 0); /* an EmptyResponse packs to no bytes */
}

typedef int (*prepare_key_fn)(master *m, const char *key, obj_record *out);

static int prep_revoke(master *m, const char *key, obj_record *out)
{
    return obj_prepare_put_revoke(master_objs(m), key, out);
}

static int prep_remove(master *m, const char *key, obj_record *out)
{
    return obj_prepare_remove(master_objs(m), key, master_now_ms(), out);
}

/* Whether a client's removal of key is refused for a key space (answered
 * on call): only a member of a group the claiming plugin owns is; an
 * object there in no such group is nobody's, and a key with no object is
 * answered SMP_ENOTFOUND, as anywhere. */
static int key_space_refuses_removal(master *m, smp_rpc_call *call, const char *key)
{
    host_key_space ks;
    smp_object_info info = {.struct_size = sizeof(info)};
    if (!host_plugins_key_space_of(m->plugins, key, &ks) ||
        obj_object_info(master_objs(m), key, &info) < 0 || info.group == NULL || info.group[0] == '\0')
        return 0;
    const char *owner = obj_group_owner(master_objs(m), info.group);
    if (owner == NULL || strcmp(owner, ks.plugin) != 0) return 0;
    reply_key_space(call, "remove", key, &ks);
    return 1;
}

/* One key, one record, answered when durable. key_spaces: a removal, which
 * a key space may refuse first (key_space_refuses_removal). */
static int commit_key_request(master *m, smp_rpc_call *call, const uint8_t *body, size_t len,
                              prepare_key_fn prepare, const char *what, int key_spaces)
{
    obj_record rec = {0};
    DECODE_KEY(req, body, len, call);
    if (!key_visible(call, req->key, what) ||
        (key_spaces && key_space_refuses_removal(m, call, req->key))) {
        DECODED_KEY_FREE(req);
        return SMP_OK;
    }
    int rc = master_key_pending(m, req->key) ? SMP_EBUSY : prepare(m, req->key, &rec);
    if (rc == SMP_OK) rc = master_commit(m, &rec, req->key, on_empty_durable, call);
    if (rc < 0) reply_key_err(m, call, rc, what, req->key);
    DECODED_KEY_FREE(req);
    return SMP_OK;
}

static int h_put_revoke(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    return commit_key_request(ctx, call, body, len, prep_revoke, "put revoke", 0);
}

static int h_remove(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    return commit_key_request(ctx, call, body, len, prep_remove, "remove", 1);
}

/* -- reads ------------------------------------------------------------------ */

#define MAX_REPLICAS 16

/* SMP_EAGAIN for a get of key, a complete object with no complete replica:
 * one still being written or loaded may end it (retry), but with none
 * under way its data is gone until its plugin restores it or it is
 * removed, and the reply says so rather than a bare "try again". */
static void reply_no_replica(master *m, smp_rpc_call *call, const char *key)
{
    obj_replica reps[MAX_REPLICAS];
    size_t n = 0;
    int pending = 0;
    if (obj_object_replicas(master_objs(m), key, reps, MAX_REPLICAS, &n) == SMP_OK)
        for (size_t i = 0; i < n && i < MAX_REPLICAS; i++) pending |= reps[i].status == OBJ_REPLICA_PENDING;
    if (pending) {
        reply_err(call, SMP_EAGAIN, "get replicas: a replica is still being written or loaded", key);
        return;
    }
    char msg[1400];
    snprintf(msg, sizeof(msg),
             "get replicas '%.1024s': %s: it has no replica left (its data is lost: `weightctl fsck` "
             "lists such objects); remove it, or its plugin restores it",
             key, smp_strerror(SMP_EAGAIN));
    rpc_reply_error(call, SMP_EAGAIN, msg);
}

/* The READ ticket of replica r of key: its memory range, or its cold
 * file's data (named by the file's bare name, as READ_COLD names it). */
static int read_ticket(master *m, const char *key, const obj_replica *r, const smp_object_info *info,
                       uint8_t *out, size_t *len)
{
    const char *path = r->path ? r->path : "";
    const char *slash = strrchr(path, '/');
    master_ticket_req tr = {.op = TICKET_OP_READ, .node = r->node, .key = key,
                            .tenant = obj_object_tenant(master_objs(m), key)};
    if (r->kind == SMP_REPLICA_MEMORY) {
        tr.segment = r->segment ? r->segment : "";
        tr.offset = r->offset;
        tr.length = r->length;
    } else {
        tr.segment = slash ? slash + 1 : path;
        tr.length = info->size;
    }
    return master_mint_ticket(m, &tr, out, TICKET_MAX_BYTES, len);
}

/* A read found nothing under key (SMP_EVENT_READ_MISS): the plugin that owns
 * the key's group checks it against the replicas. group is "" when the
 * object is unknown. */
static void emit_read_miss(master *m, const char *key, const char *group)
{
    smp_event ev = {.struct_size = sizeof(ev), .type = SMP_EVENT_READ_MISS, .key = key, .group = group};
    master_emit(m, &ev);
}

static int h_get_replicas(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    obj_replica reps[MAX_REPLICAS];
    ReplicaLocation locs[MAX_REPLICAS];
    ReplicaLocation *plocs[MAX_REPLICAS];
    uint8_t tickets[MAX_REPLICAS][TICKET_MAX_BYTES];
    size_t n = 0;
    DECODE_KEY(req, body, len, call);
    if (!key_visible(call, req->key, "get replicas")) goto free_req;
    uint64_t now = master_now_ms();
    int rc = obj_get_replica_list(master_objs(m), req->key, now, MASTER_READ_LEASE_MS, reps, MAX_REPLICAS, &n);
    smp_object_info info = {.struct_size = sizeof(info)};
    if (rc == SMP_OK && master_replicas_awaited(m, reps, n < MAX_REPLICAS ? n : MAX_REPLICAS, now) &&
        master_node_wait_park(m, call, body, len))
        goto free_req; /* run again when a node registers */
    /* The lease is the connection's, so that it can give it back. */
    if (rc == SMP_OK)
        rc = rlease_take(m->read_leases, rpc_server_call_conn(call), req->key, now, MASTER_READ_LEASE_MS);
    if (rc == SMP_OK) rc = obj_object_info(master_objs(m), req->key, &info);
    if (rc < 0) {
        if (rc == SMP_ENOTFOUND) {
            emit_read_miss(m, req->key, "");
        } else if (rc == SMP_EAGAIN) { /* known, but no complete replica left */
            int known = obj_object_info(master_objs(m), req->key, &info) == SMP_OK && info.group != NULL;
            emit_read_miss(m, req->key, known ? info.group : "");
            reply_no_replica(m, call, req->key);
            goto free_req;
        }
        reply_err(call, rc, "get replicas", req->key);
        goto free_req;
    }
    if (n > MAX_REPLICAS) n = MAX_REPLICAS;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t tlen = 0;
        if (!master_node_readable(m, reps[i].node)) continue; /* its node is down */
        if (read_ticket(m, req->key, &reps[i], &info, tickets[k], &tlen) < 0)
            continue; /* unreadable without one */
        replica_location__init(&locs[k]);
        locs[k].ticket.data = tickets[k];
        locs[k].ticket.len = tlen;
        locs[k].kind = reps[i].kind;
        locs[k].status = reps[i].status;
        locs[k].node = (char *)(reps[i].node ? reps[i].node : "");
        locs[k].segment = (char *)(reps[i].segment ? reps[i].segment : "");
        locs[k].offset = reps[i].offset;
        locs[k].length = reps[i].length;
        locs[k].path = (char *)(reps[i].path ? reps[i].path : "");
        /* Both kinds are read through the node's data server (a cold one with
         * READ_COLD); only a memory replica has a segment file to map. */
        locs[k].data_addr = (char *)master_node_data_addr(m, reps[i].node);
        locs[k].data_tls = master_node_data_tls(m, reps[i].node);
        if (reps[i].kind == SMP_REPLICA_MEMORY)
            master_node_locate(m, reps[i].node, obj_object_tenant(master_objs(m), req->key),
                               m->cfg->auth_enabled, &locs[k]);
        plocs[k] = &locs[k];
        k++;
    }
    if (k == 0) {
        emit_read_miss(m, req->key, info.group ? info.group : "");
        reply_err(call, SMP_EAGAIN, "get replicas: no replica on a live node", req->key);
        goto free_req;
    }
    n = k;
    GetReplicasResponse resp = GET_REPLICAS_RESPONSE__INIT;
    resp.size = info.size;
    resp.data_type = (DataType)info.data_type;
    resp.group = (char *)(info.group ? info.group : "");
    resp.sha256.data = info.checksum;
    resp.sha256.len = sizeof(info.checksum);
    resp.n_replicas = n;
    resp.replicas = plocs;
    resp.lease_expires_ms = master_wall_ms() + MASTER_READ_LEASE_MS;
    resp.lease_release = 1;
    master_reply_msg(call, &resp.base);
free_req:
    DECODED_KEY_FREE(req);
    return SMP_OK;
}

#ifndef WM_TEST_NO_READ_LEASE_RELEASE
/* Give back read leases the caller's connection took (see
 * ReleaseReadLeasesRequest): every key is checked against the caller's
 * tenant first (a key it may not name is answered as absent, as its lookup
 * would be, and nothing is released); then one lookup's lease of this
 * connection per key listed ends, and the object's lease end drops to the
 * end of the leases others still hold. Refused with NOT_FOUND, nothing
 * changed, when the connection held none of them. */
static int h_release_read_leases(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    char msg[700];
    DECODE(ReleaseReadLeasesRequest, release_read_leases_request, req, body, len, call);
    if (req->n_keys > MASTER_RELEASE_MAX_KEYS) {
        snprintf(msg, sizeof(msg), "release read leases: %zu keys, at most %d per request",
                 req->n_keys, MASTER_RELEASE_MAX_KEYS);
        rpc_reply_error(call, SMP_EINVAL, msg);
        goto free_req;
    }
    for (size_t i = 0; i < req->n_keys; i++)
        if (!key_visible(call, req->keys[i], "release read leases")) goto free_req;
    uint64_t holder = rpc_server_call_conn(call), now = master_now_ms();
    ReleaseReadLeasesResponse resp = RELEASE_READ_LEASES_RESPONSE__INIT;
    for (size_t i = 0; i < req->n_keys; i++) {
        uint64_t ends = 0;
        if (rlease_release(m->read_leases, holder, req->keys[i], now, &ends) < 0) {
            resp.not_held++;
            continue;
        }
        resp.released++;
        (void)obj_set_lease_end(master_objs(m), req->keys[i], ends); /* gone: nothing to end */
    }
    if (req->n_keys > 0 && resp.released == 0) {
        snprintf(msg, sizeof(msg), "release read leases: this connection holds no read lease "
                 "on '%.512s'%s (expired, released already, or taken by another connection)",
                 req->keys[0], req->n_keys > 1 ? " nor on the other keys listed" : "");
        rpc_reply_error(call, SMP_ENOTFOUND, msg);
        goto free_req;
    }
    master_reply_msg(call, &resp.base);
free_req:
    DECODED_FREE(req);
    return SMP_OK;
}
#endif /* WM_TEST_NO_READ_LEASE_RELEASE */

/* A reader says bytes it read of key from a memory replica did not match
 * the object's digest: a key outside the caller's tenant is answered as
 * absent; the rest is master_report_corrupt's (which never takes the
 * reader's word: the node hashes the replica first). */
static int h_report_corrupt(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    DECODE(ReportCorruptRequest, report_corrupt_request, req, body, len, call);
    if (key_visible(call, req->key, "report corrupt")) master_report_corrupt(m, call, req);
    DECODED_FREE(req);
    return SMP_OK;
}

/* A connection closed: the read leases it still held end now. */
static void lease_end_visit(void *arg, const char *key, uint64_t ends)
{
    master *m = arg;
    (void)obj_set_lease_end(master_objs(m), key, ends);
}

static void on_conn_closed(void *arg, uint64_t conn)
{
    master *m = arg;
    (void)rlease_drop_holder(m->read_leases, conn, master_now_ms(), lease_end_visit, m);
}

static int h_exists(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    DECODE_KEY(req, body, len, call);
    ExistsResponse resp = EXISTS_RESPONSE__INIT;
    const char *tenant = confined_tenant(call);
    resp.exists = (tenant == NULL || key_in_tenant(req->key, tenant)) &&
                  obj_exists(master_objs(m), req->key) != 0;
    master_reply_msg(call, &resp.base);
    DECODED_KEY_FREE(req);
    return SMP_OK;
}

static int h_list(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    DECODE(ListRequest, list_request, req, body, len, call);
    size_t limit = req->limit ? req->limit : MASTER_LIST_DEFAULT;
    if (limit > MASTER_LIST_MAX) limit = MASTER_LIST_MAX;
    const char **keys = calloc(limit, sizeof(*keys));
    size_t n = 0;
    int more = 0;
    int rc = keys ? obj_list_prefix(master_objs(m), req->prefix, confined_tenant(call),
                                    req->cursor[0] ? req->cursor : NULL, limit, keys, &n, &more)
                  : SMP_ENOMEM;
    if (rc < 0) {
        reply_err(call, rc, "list", req->prefix);
    } else {
        ListResponse resp = LIST_RESPONSE__INIT;
        resp.n_keys = n;
        resp.keys = (char **)keys;
        resp.next_cursor = (char *)(more && n > 0 ? keys[n - 1] : "");
        master_reply_msg(call, &resp.base);
    }
    free(keys);
    DECODED_FREE(req);
    return SMP_OK;
}

/* -- remove by prefix ------------------------------------------------------- */

typedef struct prefix_ctx {
    smp_rpc_call *call;
    size_t outstanding;
    int status;
    obj_remove_report rep;
} prefix_ctx;

static void on_prefix_record(master *m, void *arg, int status, uint64_t seq)
{
    prefix_ctx *c = arg;
    (void)m;
    (void)seq;
    if (status < 0 && c->status == SMP_OK) c->status = status;
    if (--c->outstanding > 0) return;
    if (c->status < 0) {
        rpc_reply_error(c->call, c->status, "remove by prefix: a record did not become durable");
    } else {
        RemovePrefixResponse resp = REMOVE_PREFIX_RESPONSE__INIT;
        resp.removed = c->rep.removed;
        resp.skipped = c->rep.skipped_leased + c->rep.skipped_vetoed + c->rep.skipped_partial;
        master_reply_msg(c->call, &resp.base);
    }
    free(c);
}

static int h_remove_prefix(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    obj_record_list recs = {0};
    DECODE(RemovePrefixRequest, remove_prefix_request, req, body, len, call);
    prefix_ctx *c = calloc(1, sizeof(*c));
    int rc = c ? obj_prepare_remove_prefix(master_objs(m), req->prefix, master_now_ms(), &recs, &c->rep)
               : SMP_ENOMEM;
    if (rc < 0) {
        free(c);
        reply_err(call, rc, "remove by prefix", req->prefix);
        goto free_req;
    }
    c->call = call;
    c->outstanding = 1; /* held until every record is appended */
    for (size_t i = 0; i < recs.n; i++) {
        c->outstanding++;
        if ((rc = master_commit(m, &recs.recs[i], NULL, on_prefix_record, c)) < 0) {
            c->outstanding--;
            if (c->status == SMP_OK) c->status = rc;
        }
    }
    on_prefix_record(m, c, SMP_OK, 0);
free_req:
    obj_record_list_free(&recs);
    DECODED_FREE(req);
    return SMP_OK;
}

/* Refused: a group's managed flag belongs to the plugin that owns the group
 * (its owner is persisted with the flag), so no client sets or clears it.
 * The method stays known so the refusal is explicit; nothing changes. */
static int h_group_set_managed(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)ctx;
    (void)body;
    (void)len;
    rpc_reply_error(call, SMP_ENOTSUP,
                    "group set managed: the managed flag of a group is set only by the plugin "
                    "that owns the group, not by a client");
    return SMP_OK;
}

static const smp_rpc_method objects_methods[] = {
    {sizeof(smp_rpc_method), OBJECTS_METHOD__OBJ_PUT_START, "put_start", h_put_start, SMP_ROLE_WRITER},
    {sizeof(smp_rpc_method), OBJECTS_METHOD__OBJ_PUT_END, "put_end", h_put_end, SMP_ROLE_WRITER},
    {sizeof(smp_rpc_method), OBJECTS_METHOD__OBJ_PUT_REVOKE, "put_revoke", h_put_revoke, SMP_ROLE_WRITER},
    {sizeof(smp_rpc_method), OBJECTS_METHOD__OBJ_GET_REPLICAS, "get_replicas", h_get_replicas, SMP_ROLE_READER},
    {sizeof(smp_rpc_method), OBJECTS_METHOD__OBJ_EXISTS, "exists", h_exists, SMP_ROLE_READER},
    {sizeof(smp_rpc_method), OBJECTS_METHOD__OBJ_REMOVE, "remove", h_remove, SMP_ROLE_WRITER},
    {sizeof(smp_rpc_method), OBJECTS_METHOD__OBJ_REMOVE_PREFIX, "remove_prefix", h_remove_prefix, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), OBJECTS_METHOD__OBJ_LIST, "list", h_list, SMP_ROLE_READER},
    {sizeof(smp_rpc_method), OBJECTS_METHOD__OBJ_GROUP_SET_MANAGED, "group_set_managed",
     h_group_set_managed, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), OBJECTS_METHOD__OBJ_REPORT_CORRUPT, "report_corrupt", h_report_corrupt,
     SMP_ROLE_READER},
#ifndef WM_TEST_NO_READ_LEASE_RELEASE
    /* Left out of store_master_no_lease_release (tests/CMakeLists.txt), a
     * master that answers it as unknown, for the client's side of a rolling
     * upgrade (test_upgrade_read_lease_release). */
    {sizeof(smp_rpc_method), OBJECTS_METHOD__OBJ_RELEASE_READ_LEASES, "release_read_leases",
     h_release_read_leases, SMP_ROLE_READER},
#endif
};

int master_objects_register(master *m)
{
    if (m->read_leases == NULL && (m->read_leases = rlease_create()) == NULL) return SMP_ENOMEM;
    rpc_server_set_close_hook(m->rpc, on_conn_closed, m);
    return rpc_server_add_service(m->rpc, HOST_SERVICE__HOST_SERVICE_OBJECTS, "objects",
                                  objects_methods,
                                  sizeof(objects_methods) / sizeof(objects_methods[0]), m);
}

void master_objects_free(master *m)
{
    rlease_destroy(m->read_leases);
    m->read_leases = NULL;
}
