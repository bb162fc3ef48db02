/* master_commit.c -- the one path every mutation takes: durable, then visible.
 *
 * A mutation is prepared (validated and encoded by obj_store, or by a plugin),
 * appended to the OpLog, and applied to the state only from the durable
 * callback; the caller's completion runs after that, so an RPC answered from
 * it never reports something that a crash could undo. Keys with a mutation in
 * flight are remembered so a second mutation of the same key is refused with
 * SMP_EBUSY instead of being validated against a state about to change, and
 * the object store holds the keys a record removes or replaces until it is
 * applied (no read lease is granted on bytes about to be freed).
 * applied_seq advances with every durable callback, host or plugin, which is
 * what a snapshot may claim to include. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_uthash.h"
#include "master_internal.h"

struct master_pending_key {
    UT_hash_handle hh;
    char key[]; /* one allocation with the entry */
};

typedef struct commit_ctx {
    master *m;
    uint16_t type;
    uint16_t encver;
    uint8_t *buf;
    size_t len;
    char *key;               /* pending mark to clear, or NULL */
    obj_held *held;          /* keys held until applied, or NULL */
    master_commit_cb done;
    void *arg;
} commit_ctx;

int master_key_pending(const master *m, const char *key)
{
    master_pending_key *p = NULL;
    HASH_FIND_STR(m->pending, key, p);
    return p != NULL;
}

static int pending_add(master *m, const char *key, char **out)
{
    master_pending_key *p;
    size_t len = strlen(key);
    if (master_key_pending(m, key)) return SMP_EBUSY;
    p = malloc(sizeof(*p) + len + 1);
    if (p == NULL) return SMP_ENOMEM;
    memset(&p->hh, 0, sizeof(p->hh));
    memcpy(p->key, key, len + 1);
    HASH_ADD_KEYPTR(hh, m->pending, p->key, len, p);
    *out = p->key;
    return SMP_OK;
}

static void pending_del(master *m, const char *key)
{
    master_pending_key *p = NULL;
    HASH_FIND_STR(m->pending, key, p);
    if (p == NULL) return;
    HASH_DEL(m->pending, p);
    free(p);
}

void master_pending_free(master *m)
{
    master_pending_key *p, *tmp;
    HASH_ITER(hh, m->pending, p, tmp) {
        HASH_DEL(m->pending, p);
        free(p);
    }
}

static void on_durable(void *arg, int status, uint64_t seq)
{
    commit_ctx *c = arg;
    master *m = c->m;
    if (status == SMP_OK) {
        /* what the record takes out of the state is cleaned up once it applied */
        if (c->type != MASTER_REC_GATE_CONFIRM) master_reclaim_before(m, c->type);
        /* a held record was decoded for its hold: apply that */
        int rc = c->held                               ? obj_apply_held(master_objs(m), c->held)
                 : c->type == MASTER_REC_GATE_CONFIRM ? master_gates_apply(m, c->buf, c->len)
                 : obj_apply_record(master_objs(m), c->type, c->encver, c->buf, c->len);
        if (rc < 0) {
            /* The record was validated against this very state; failing now
             * means the state and the log disagree. Stop before serving more. */
            fprintf(stderr, "store_master: record %llu (%s) is durable but does not apply: %s\n",
                    (unsigned long long)seq, obj_record_type_name(c->type), smp_strerror(rc));
            m->log_failed = 1;
            status = rc;
        }
        master_reclaim_after(m, rc == SMP_OK);
        m->applied_seq = seq;
    } else {
        m->log_failed = 1;
    }
    obj_release_hold(master_objs(m), c->held);
    if (c->key) pending_del(m, c->key);
    if (c->done) c->done(m, c->arg, status, seq);
    free(c->buf);
    free(c);
}

int master_commit(master *m,
                  obj_record *rec,
                  const char *key,
                  master_commit_cb done,
                  void *arg)
{
    int rc;
    commit_ctx *c = NULL;
    if (m->recovering) {
        rc = SMP_ESTATE; /* before the replay, an append would break it */
        goto free_record;
    }
    if (m->log_failed) {
        rc = SMP_EDURABILITY;
        goto free_record;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        rc = SMP_ENOMEM;
        goto free_record;
    }
    if (key != NULL && (rc = pending_add(m, key, &c->key)) < 0) goto free_ctx;
    c->m = m;
    c->type = rec->type;
    c->encver = rec->encver;
    c->buf = rec->buf;
    c->len = rec->len;
    c->done = done;
    c->arg = arg;
    if ((rc = obj_hold_record(master_objs(m), rec, &c->held)) < 0) goto unmark_key;
    rc = oplog_append(m->log, rec->type, rec->encver, rec->buf, rec->len, on_durable, c, NULL);
    if (rc < 0) goto release_hold;
    rec->buf = NULL; /* owned by c now */
    rec->len = 0;
    return SMP_OK;
release_hold:
    obj_release_hold(master_objs(m), c->held);
unmark_key:
    if (c->key) pending_del(m, c->key);
free_ctx:
    free(c);
free_record:
    obj_record_free(rec);
    return rc;
}

typedef struct plugin_append_ctx {
    master *m;
    smp_durable_cb cb;
    void *arg;
} plugin_append_ctx;

static void on_plugin_durable(void *arg, int status, uint64_t seq)
{
    plugin_append_ctx *c = arg;
    if (status == SMP_OK) c->m->applied_seq = seq;
    else c->m->log_failed = 1;
    if (c->cb) c->cb(c->arg, status, seq);
    free(c);
}

int master_append_plugin(void *ctx,
                         uint16_t type,
                         uint16_t encver,
                         const void *payload,
                         size_t len,
                         smp_durable_cb cb,
                         void *arg)
{
    master *m = ctx;
    int rc;
    if (m->recovering) return SMP_ESTATE; /* before the replay, an append would break it */
    if (m->log_failed) return SMP_EDURABILITY;
    plugin_append_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL) return SMP_ENOMEM;
    c->m = m;
    c->cb = cb;
    c->arg = arg;
    rc = oplog_append(m->log, type, encver, payload, len, on_plugin_durable, c, NULL);
    if (rc < 0) free(c);
    return rc;
}
