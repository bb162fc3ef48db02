/* master_gates.c -- capability gates confirmed at runtime, durably.
 *
 * A plugin's OpLog record type may name a gate: with HA on, the leader may
 * append that type only once the gate is confirmed, because a standby that
 * cannot replay it would stop at the first such record. A gate is confirmed
 * by config (a cluster key, read at start) or at runtime by an operator
 * (`weightctl gate confirm NAME`, ADMIN_GATE_CONFIRM). The runtime way is
 * checked against the cluster as it is: the leader refuses while any
 * registered master does not advertise every record type the gate guards,
 * and names that master. A confirmation is itself a host record (type 4,
 * GATE_CONFIRM), so every master learns it by replay and a failover keeps
 * it; snapshots carry the confirmed names in the "host_gates" section. A gate
 * is never unconfirmed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ha_election.h"
#include "host_records.pb-c.h"
#include "host_rpc.pb-c.h"
#include "master_internal.h"

#define GATE_NAME_MAX 128

/* -- the confirmed set ------------------------------------------------------------- */

static int confirmed_index(const master *m, const char *gate)
{
    for (size_t i = 0; i < m->n_gates; i++)
        if (strcmp(m->gates[i], gate) == 0) return (int)i;
    return -1;
}

int master_gate_confirmed(void *ctx, const char *gate)
{
    return gate != NULL && confirmed_index(ctx, gate) >= 0;
}

/* Add a name (idempotent). A name that is empty, too long or not printable
 * is refused: it can only come from damaged bytes. */
static int confirm(master *m, const char *gate, size_t len)
{
    if (len == 0 || len > GATE_NAME_MAX) return SMP_EPROTO;
    for (size_t i = 0; i < len; i++)
        if (gate[i] <= ' ' || gate[i] >= 0x7f) return SMP_EPROTO;
    char name[GATE_NAME_MAX + 1];
    memcpy(name, gate, len);
    name[len] = '\0';
    if (confirmed_index(m, name) >= 0) return SMP_OK;
    char **v = realloc(m->gates, (m->n_gates + 1) * sizeof(*v));
    if (v == NULL) return SMP_ENOMEM;
    m->gates = v;
    if ((v[m->n_gates] = strdup(name)) == NULL) return SMP_ENOMEM;
    m->n_gates++;
    return SMP_OK;
}

int master_gates_apply(master *m, const uint8_t *payload, size_t len)
{
    Hostrec__GateRecord *r = hostrec__gate_record__unpack(NULL, len, payload);
    if (r == NULL) return SMP_EPROTO;
    int rc = confirm(m, r->gate, strlen(r->gate));
    hostrec__gate_record__free_unpacked(r, NULL);
    return rc;
}

void master_gates_free(master *m)
{
    for (size_t i = 0; i < m->n_gates; i++) free(m->gates[i]);
    free(m->gates);
    m->gates = NULL;
    m->n_gates = 0;
}

/* -- snapshot section: the names, one per line ------------------------------------- */

int master_gates_save(const master *m, smp_writer *w)
{
    int rc;
    for (size_t i = 0; i < m->n_gates; i++) {
        if ((rc = snap_writer_write(w, m->gates[i], strlen(m->gates[i]))) < 0 ||
            (rc = snap_writer_write(w, "\n", 1)) < 0)
            return rc;
    }
    return SMP_OK;
}

int master_gates_load(master *m, const uint8_t *data, size_t len, char *err, size_t errlen)
{
    size_t at = 0;
    while (at < len) {
        const uint8_t *nl = memchr(data + at, '\n', len - at);
        size_t n = nl != NULL ? (size_t)(nl - (data + at)) : len - at;
        int rc = nl != NULL ? confirm(m, (const char *)data + at, n) : SMP_EPROTO;
        if (rc < 0) {
            snprintf(err, errlen, "snapshot: section '%s' is malformed at byte %zu",
                     MASTER_SECTION_GATES, at);
            return rc;
        }
        at += n + 1;
    }
    return SMP_OK;
}

/* -- what a gate guards and who blocks it -------------------------------------------- */

/* The record types registered with this gate, up to cap; returns how many. */
static size_t gate_types(const master *m, const char *gate, uint32_t *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < host_plugins_n_oplog_types(m->plugins); i++) {
        const host_oplog_type_reg *t = host_plugins_oplog_type_at(m->plugins, i);
        if (t->t.gate == NULL || strcmp(t->t.gate, gate) != 0) continue;
        if (n < cap) out[n] = t->t.type;
        n++;
    }
    return n;
}

/* Why the gate cannot be confirmed now, into why ("" when it can): a
 * registered master that does not advertise one of its types. Without HA
 * this master is the cluster, and it replays what it registered. */
static void gate_blockers(master *m, const uint32_t *types, size_t n, char *why, size_t cap)
{
    why[0] = '\0';
    if (!m->cfg->ha_enabled) return;
    ha_member members[32];
    size_t nm = master_ha_members(m, members, 32);
    if (nm > 32) nm = 32;
    if (nm == 0) {
        snprintf(why, cap, "no master has registered in etcd yet");
        return;
    }
    for (size_t i = 0; i < nm; i++) {
        for (size_t k = 0; k < n; k++) {
            int has = 0;
            for (size_t j = 0; j < members[i].n_types && !has; j++)
                has = members[i].types[j] == types[k];
            if (has) continue;
            const host_oplog_type_reg *t = host_plugins_oplog_type(m->plugins, (uint16_t)types[k]);
            size_t used = strlen(why);
            snprintf(why + used, cap - used, "%smaster %s cannot replay type %u (%s)",
                     used ? "; " : "", members[i].id, (unsigned)types[k], t ? t->t.name : "?");
            break;
        }
    }
}

/* Fill *g for gate (strings point into m, types into types[]). */
static void gate_info(master *m, const char *gate, GateInfo *g, uint32_t *types, size_t cap,
                      char *why, size_t whycap)
{
    gate_info__init(g);
    g->name = (char *)gate;
    size_t n = gate_types(m, gate, types, cap);
    g->types = types;
    g->n_types = n < cap ? n : cap;
    int by_record = master_gate_confirmed(m, gate);
    int any = host_plugins_gate_confirmed(m->plugins, NULL, gate);
    g->confirmed = any;
    g->how = (char *)(by_record ? "record" : any ? "config" : "");
    gate_blockers(m, types, g->n_types, why, whycap);
    g->blocked_by = any ? "" : why;
}

/* The distinct gates the loaded plugins' types name, up to cap. */
static size_t gate_names(const master *m, const char **out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < host_plugins_n_oplog_types(m->plugins); i++) {
        const char *g = host_plugins_oplog_type_at(m->plugins, i)->t.gate;
        int seen = g == NULL;
        for (size_t k = 0; k < n && !seen; k++) seen = strcmp(out[k], g) == 0;
        if (!seen && n < cap) out[n++] = g;
    }
    return n;
}

/* -- status: every gate ------------------------------------------------------------- */

#define STATUS_GATES 16
#define GATE_TYPES 32

struct master_gates_view {
    GateInfo infos[STATUS_GATES];
    GateInfo *ptrs[STATUS_GATES];
    uint32_t types[STATUS_GATES][GATE_TYPES];
    char why[STATUS_GATES][512];
};

size_t master_gates_view_fill(master *m, master_gates_view **out)
{
    const char *names[STATUS_GATES];
    size_t n = gate_names(m, names, STATUS_GATES);
    master_gates_view *v = calloc(1, sizeof(*v));
    *out = v;
    if (v == NULL) return 0;
    for (size_t i = 0; i < n; i++) {
        gate_info(m, names[i], &v->infos[i], v->types[i], GATE_TYPES, v->why[i], sizeof(v->why[i]));
        v->ptrs[i] = &v->infos[i];
    }
    return n;
}

GateInfo **master_gates_view_ptrs(master_gates_view *v)
{
    return v != NULL ? v->ptrs : NULL;
}

/* -- ADMIN_GATE_CONFIRM ------------------------------------------------------------- */

typedef struct confirm_ctx {
    smp_rpc_call *call;
    char gate[GATE_NAME_MAX + 1];
} confirm_ctx;

static void reply_info(master *m, smp_rpc_call *call, const char *gate)
{
    GateInfo g;
    uint32_t types[GATE_TYPES];
    char why[512];
    gate_info(m, gate, &g, types, GATE_TYPES, why, sizeof(why));
    master_reply_msg(call, &g.base);
}

/* Append a GATE_CONFIRM record of gate; done(m, arg, status, seq) once it
 * is durable or failed (not called when this returns an error). */
static int commit_confirmation(master *m, const char *gate,
                               void (*done)(master *, void *, int, uint64_t), void *arg)
{
    Hostrec__GateRecord g = HOSTREC__GATE_RECORD__INIT;
    g.gate = (char *)gate;
    obj_record rec = {.type = MASTER_REC_GATE_CONFIRM, .encver = OBJ_REC_ENCVER};
    rec.len = hostrec__gate_record__get_packed_size(&g);
    if ((rec.buf = malloc(rec.len ? rec.len : 1)) == NULL) return SMP_ENOMEM;
    hostrec__gate_record__pack(&g, rec.buf);
    return master_commit(m, &rec, NULL, done, arg);
}

static void on_confirmed(master *m, void *arg, int status, uint64_t seq)
{
    confirm_ctx *c = arg;
    (void)seq;
    if (status < 0) {
        rpc_reply_error(c->call, status, "gate confirm: the record could not be made durable");
    } else {
        fprintf(stderr, "store_master: gate %s confirmed (record %llu)\n", c->gate,
                (unsigned long long)seq);
        reply_info(m, c->call, c->gate);
    }
    free(c);
}

int master_gates_h_confirm(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    char msg[700];
    uint32_t types[GATE_TYPES];
    GateRequest *req = gate_request__unpack(NULL, len, body);
    if (req == NULL) return rpc_reply_error(call, SMP_EPROTO, "gate confirm: bad request");
    int rc = SMP_OK;
    size_t n = strlen(req->name) <= GATE_NAME_MAX ? gate_types(m, req->name, types, GATE_TYPES) : 0;
    if (n == 0) {
        snprintf(msg, sizeof(msg), "gate confirm: no loaded plugin has a record type gated by '%.128s'",
                 req->name);
        rc = rpc_reply_error(call, SMP_ENOTFOUND, msg);
        goto out;
    }
    if (host_plugins_gate_confirmed(m->plugins, NULL, req->name)) {
        reply_info(m, call, req->name); /* already: nothing to write */
        goto out;
    }
    char why[512];
    gate_blockers(m, types, n < GATE_TYPES ? n : GATE_TYPES, why, sizeof(why));
    if (why[0] != '\0') {
        snprintf(msg, sizeof(msg), "gate confirm: %.128s stays closed: %s", req->name, why);
        rc = rpc_reply_error(call, SMP_EGATE, msg);
        goto out;
    }
    confirm_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        rc = rpc_reply_error(call, SMP_ENOMEM, "gate confirm: out of memory");
        goto out;
    }
    c->call = call;
    snprintf(c->gate, sizeof(c->gate), "%s", req->name);
    if ((rc = commit_confirmation(m, req->name, on_confirmed, c)) < 0) {
        free(c);
        rc = rpc_reply_error(call, rc, "gate confirm: the record was refused");
    }
out:
    gate_request__free_unpacked(req, NULL);
    return rc;
}
