/* master_recovery.c -- rebuilding the state at startup, failing closed.
 *
 * Recovery is the newest snapshot plus the OpLog after it. The snapshot is
 * validated whole before anything else is loaded (snapshot.c), but for the
 * host's objects: once their section's frame is read and checked, they load
 * on a thread of their own as their bytes arrive, while the file's rest is
 * read and every checksum checked (a file refused then refuses the start
 * all the same, and the objects built from its bytes are dropped), and
 * while each loaded plugin loads its own section (an empty reader when the
 * snapshot has none) on this one; sections no plugin claims are kept
 * verbatim for the
 * next snapshot, and records carried from an earlier run are replayed to a
 * plugin that is back or kept again. The log is replayed record by record: a
 * host record applies to the object store, a plugin record goes to the plugin
 * that registered its type. A record nobody can replay, or of an encoding
 * newer than its plugin registered, stops startup with its sequence and type
 * named. A record of a type no loaded plugin registered belongs to a plugin
 * that is absent from the config or disabled: it is kept verbatim (carried
 * through snapshots) and replayed when its plugin is loaded again, so
 * starting without a plugin needs no configuration; the host keeps
 * protecting the managed groups it owns (obj_store.h, guard rule). An HA
 * standby following a live leader does not carry: it must be able to replay
 * everything the leader writes (see master_ha.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master_internal.h"

typedef struct replay_ctx {
    master *m;
    char *err;
    size_t errlen;
} replay_ctx;

void master_carried_free(master *m)
{
    for (size_t i = 0; i < m->n_carried_recs; i++) free(m->carried_recs[i].payload);
    free(m->carried_recs);
    m->carried_recs = NULL;
    m->n_carried_recs = 0;
    for (size_t i = 0; i < m->n_carried_secs; i++) {
        free(m->carried_secs[i].name);
        free(m->carried_secs[i].data);
    }
    free(m->carried_secs);
    m->carried_secs = NULL;
    m->n_carried_secs = 0;
}

static int carry_record(master *m, uint64_t seq, uint16_t type, uint16_t encver,
                        const uint8_t *payload, uint32_t len)
{
    master_carried_record *recs =
        realloc(m->carried_recs, (m->n_carried_recs + 1) * sizeof(*recs));
    if (recs == NULL) return SMP_ENOMEM;
    m->carried_recs = recs;
    uint8_t *copy = malloc(len ? len : 1);
    if (copy == NULL) return SMP_ENOMEM;
    if (len) memcpy(copy, payload, len);
    recs[m->n_carried_recs++] = (master_carried_record){seq, type, encver, copy, len};
    return SMP_OK;
}

/* Hand one plugin record to its plugin; describe any refusal in err. */
static int replay_plugin_record(const host_oplog_type_reg *reg,
                                uint64_t seq,
                                uint16_t encver,
                                const uint8_t *payload,
                                size_t len,
                                char *err,
                                size_t errlen)
{
    const char *plugin = host_plugin_desc(reg->owner)->name;
    if (encver < reg->t.min_encver || encver > reg->t.max_encver) {
        snprintf(err, errlen,
                 "oplog: record %llu has type %u (%s) encoding version %u, but %s replays %u..%u",
                 (unsigned long long)seq, (unsigned)reg->t.type, reg->t.name, (unsigned)encver,
                 plugin, (unsigned)reg->t.min_encver, (unsigned)reg->t.max_encver);
        return SMP_ERANGE;
    }
    smp_record rec = {sizeof(rec), seq, reg->t.type, encver, payload, len};
    int rc = reg->t.replay(host_plugin_state(reg->owner), &rec);
    if (rc < 0)
        snprintf(err, errlen, "oplog: record %llu of type %u (%s) was refused by %s: %s",
                 (unsigned long long)seq, (unsigned)reg->t.type, reg->t.name, plugin,
                 smp_strerror(rc));
    return rc;
}

int master_apply_record(master *m, const oplog_record *rec, int carry, char *err, size_t errlen)
{
    int rc;
    if (rec->type == MASTER_REC_GATE_CONFIRM) {
        if ((rc = master_gates_apply(m, rec->payload, rec->len)) < 0) {
            snprintf(err, errlen, "oplog: record %llu (GATE_CONFIRM) does not apply: %s",
                     (unsigned long long)rec->seq, smp_strerror(rc));
            return rc;
        }
    } else if (rec->type >= 1 && rec->type <= SMP_OPLOG_HOST_TYPE_MAX) {
        rc = obj_apply_record(master_objs(m), rec->type, rec->encver, rec->payload, rec->len);
        if (rc < 0) {
            snprintf(err, errlen, "oplog: record %llu of host type %u (%s) at encoding version "
                     "%u does not apply: %s", (unsigned long long)rec->seq, (unsigned)rec->type,
                     obj_record_type_name(rec->type), (unsigned)rec->encver, smp_strerror(rc));
            return rc;
        }
    } else {
        const host_oplog_type_reg *reg = host_plugins_oplog_type(m->plugins, rec->type);
        if (reg != NULL) {
            rc = replay_plugin_record(reg, rec->seq, rec->encver, rec->payload, rec->len,
                                      err, errlen);
            if (rc < 0) return rc;
        } else if (carry) {
            if ((rc = carry_record(m, rec->seq, rec->type, rec->encver, rec->payload, rec->len)) < 0)
                return rc;
        } else {
            snprintf(err, errlen, "oplog: record %llu has type %u but no loaded plugin replays it",
                     (unsigned long long)rec->seq, (unsigned)rec->type);
            return SMP_ENOTFOUND;
        }
    }
    m->applied_seq = rec->seq;
    return SMP_OK;
}

static int replay_one(void *arg, const oplog_record *rec)
{
    replay_ctx *c = arg;
    return master_apply_record(c->m, rec, 1, c->err, c->errlen);
}

/* Records carried from an earlier run: replay those whose plugin is loaded
 * again (in sequence order, right after the plugin's section), keep carrying
 * the rest. */
static int settle_carried_records(master *m, char *err, size_t errlen)
{
    size_t kept = 0;
    int rc = SMP_OK;
    for (size_t i = 0; i < m->n_carried_recs; i++) {
        master_carried_record *r = &m->carried_recs[i];
        const host_oplog_type_reg *reg = host_plugins_oplog_type(m->plugins, r->type);
        if (reg != NULL) {
            if (rc == SMP_OK)
                rc = replay_plugin_record(reg, r->seq, r->encver, r->payload, r->len, err, errlen);
            free(r->payload);
            continue;
        }
        m->carried_recs[kept++] = *r;
    }
    m->n_carried_recs = kept;
    return rc;
}

static int carry_section(master *m, const snap_section *s)
{
    master_carried_section *secs =
        realloc(m->carried_secs, (m->n_carried_secs + 1) * sizeof(*secs));
    if (secs == NULL) return SMP_ENOMEM;
    m->carried_secs = secs;
    master_carried_section *c = &secs[m->n_carried_secs];
    c->name = strdup(s->name);
    c->data = malloc(s->len ? s->len : 1);
    if (c->name == NULL || c->data == NULL) {
        free(c->name);
        free(c->data);
        return SMP_ENOMEM;
    }
    memcpy(c->data, s->data, s->len);
    c->len = s->len;
    c->encver = s->encver;
    m->n_carried_secs++;
    return SMP_OK;
}

/* The host's objects section, loading on a thread of its own while the
 * plugins load their sections on this one: the two touch disjoint state (the
 * object store; each plugin's own), read the same image, and allocate
 * through thread-safe allocators.
 *
 * Where the wait is. Only this thread can reach the store while the load
 * runs: recovery runs before the RPC server exists and before the loop
 * starts, so no RPC handler, tick, admin request or node RPC can; what can
 * is a plugin's section load() calling the host API (object and group
 * queries, the managed flag, removals, replica tasks, memory usage), and the
 * host's own code around it. Rather than a wait in each host API function
 * (a new one that forgot it would race the load), the wait is in the one
 * accessor every piece of master code reaches the store through,
 * master_objs() (master_internal.h): m->objs_.loading set means a load is
 * running, and the first master_objs() joins it. So any path, of today or
 * added later, that touches objects while the load runs waits for it and
 * sees every object of the snapshot, as when the objects loaded first. The
 * store itself checks it in debug builds (obj_store_loading_begin): an entry
 * point called from any thread but the loading one while the load runs
 * aborts, naming the entry point. */
struct master_objs_load {
    pthread_t thread;
    obj_store *objs;
    const uint8_t *data;
    size_t len;
    snap_feed *feed; /* the bytes still arriving (NULL: all in) */
    int started; /* the load ran or runs (with its result in rc) */
    int rc;
};

static size_t objs_feed_wait(void *arg, size_t upto)
{
    return snap_feed_wait(arg, upto);
}

static void *objs_load_run(void *arg)
{
    struct master_objs_load *l = arg;
    l->rc = obj_store_load_fed(l->objs, l->data, l->len, l->feed ? objs_feed_wait : NULL,
                               l->feed);
    return NULL;
}

void master_objs_settle(master *m)
{
    struct master_objs_load *l = m->objs_.loading;
    if (l == NULL) return;
    (void)pthread_join(l->thread, NULL);
    obj_store_loading_end(l->objs);
    m->objs_.loading = NULL;
}

/* Every section but the host's objects: the carried records and the gates
 * (host state of their own), each plugin's section (an empty reader when the
 * image has none), and the sections no plugin claims, kept verbatim. */
static int load_other_sections(master *m, const snap_image *img, char *err, size_t errlen)
{
    int rc;
    const snap_section *carried = img ? snap_image_section(img, MASTER_SECTION_CARRIED) : NULL;
    if (carried != NULL &&
        (rc = master_carried_records_load(m, carried->data, carried->len, err, errlen)) < 0)
        return rc;
    const snap_section *gates = img ? snap_image_section(img, MASTER_SECTION_GATES) : NULL;
    if (gates != NULL && (rc = master_gates_load(m, gates->data, gates->len, err, errlen)) < 0)
        return rc;

    for (size_t i = 0; i < host_plugins_n_sections(m->plugins); i++) {
        const host_section_reg *reg = host_plugins_section_at(m->plugins, i);
        const snap_section *s = img ? snap_image_section(img, reg->s.name) : NULL;
        const char *plugin = host_plugin_desc(reg->owner)->name;
        if (s != NULL && s->encver > reg->s.encver) {
            snprintf(err, errlen,
                     "snapshot: section '%s' has encoding version %u, newer than %s's %u",
                     s->name, (unsigned)s->encver, plugin, (unsigned)reg->s.encver);
            return SMP_ERANGE;
        }
        smp_reader r;
        snap_reader_init(&r, s);
        rc = reg->s.load(host_plugin_state(reg->owner), &r, s ? s->encver : reg->s.encver);
        if (rc < 0) {
            snprintf(err, errlen, "snapshot: section '%s' was refused by %s: %s", reg->s.name,
                     plugin, smp_strerror(rc));
            return rc;
        }
    }
    for (size_t i = 0; img && i < snap_image_count(img); i++) {
        const snap_section *s = snap_image_section_at(img, i);
        if (strcmp(s->name, MASTER_SECTION_OBJECTS) == 0 ||
            strcmp(s->name, MASTER_SECTION_CARRIED) == 0 ||
            strcmp(s->name, MASTER_SECTION_GATES) == 0 ||
            host_plugins_section(m->plugins, s->name) != NULL)
            continue;
        if ((rc = carry_section(m, s)) < 0) return rc;
    }
    return SMP_OK;
}

/* Start loading the objects section s into the store: on a thread of its
 * own (m->objs_.loading until master_objs settles it), inline when no thread
 * can be made -- but not a section whose bytes are still read by this very
 * thread (s->feed): that one is left for load_sections, whole. A section of
 * another encoding version is left alone (load_sections refuses it). */
static void objs_load_start(master *m, struct master_objs_load *ol, const snap_section *s)
{
    if (s->encver != MASTER_SECTION_ENCVER) return;
    ol->objs = m->objs_.store;
    ol->data = s->data;
    ol->len = s->len;
    ol->feed = s->feed;
    ol->started = 1;
    obj_store_loading_begin(ol->objs);
    if (pthread_create(&ol->thread, NULL, objs_load_run, ol) == 0) {
        m->objs_.loading = ol;
    } else if (ol->feed != NULL) {
        obj_store_loading_end(ol->objs);
        ol->started = 0;
    } else {
        obj_store_loading_end(ol->objs);
        objs_load_run(ol);
    }
}

typedef struct objs_early {
    master *m;
    struct master_objs_load *ol;
} objs_early;

/* snap_early's callback: the objects section's frame is read and checked
 * while its bytes and the rest of the file are still read (s->feed); start
 * its load, which takes the records as they come. NULL: the file was
 * refused after that -- wait for the load to end (the start fails; nothing
 * of the store, built from bytes never found good, is used). */
static void objs_early_fn(void *arg, const snap_section *s)
{
    objs_early *e = arg;
    if (s != NULL)
        objs_load_start(e->m, e->ol, s);
    else
        (void)master_objs(e->m);
}

/* Load every section of the image (or, with no image, give every plugin an
 * empty section): the objects on their own thread, started by now when the
 * snapshot load handed them out early (ol->started), alongside the rest,
 * then the carried records of plugins loaded again. A refused objects
 * section is the error reported, as when it loaded first and stopped the
 * rest. */
static int load_sections(master *m, const snap_image *img, struct master_objs_load *ol,
                         char *err, size_t errlen)
{
    int rc;
    const snap_section *objs = img ? snap_image_section(img, MASTER_SECTION_OBJECTS) : NULL;
    if (objs != NULL) {
        if (objs->encver != MASTER_SECTION_ENCVER) {
            snprintf(err, errlen, "snapshot: section '%s' has encoding version %u, this host reads %u",
                     objs->name, (unsigned)objs->encver, MASTER_SECTION_ENCVER);
            return SMP_ERANGE;
        }
        if (!ol->started) objs_load_start(m, ol, objs);
    }
    rc = load_other_sections(m, img, err, errlen);
    (void)master_objs(m); /* the load is over before ol goes */
    if (ol->rc < 0) {
        snprintf(err, errlen, "snapshot %s: section '%s' does not load: %s",
                 snap_image_path(img), objs->name, smp_strerror(ol->rc));
        return ol->rc;
    }
    if (rc < 0) return rc;
    return settle_carried_records(m, err, errlen);
}

/* The newest snapshot was refused as damaged (err says how): when an older
 * one is there and the OpLog still holds every record after it, add to err
 * that moving the damaged one aside lets the master start from the older one
 * plus the log. Never falls back by itself: which copy is right is the
 * operator's call (the damaged one may be the only one holding some state
 * if the log was cut past the older one -- then no hint is given). */
static void hint_older_snapshot(master *m, char *err, size_t errlen)
{
    uint64_t newest = 0, older = 0;
    char bad[sizeof(m->snap_dir) + 64], good[sizeof(m->snap_dir) + 64];
    if (snap_newest_two(m->snap_dir, &newest, &older) != SMP_OK || older == 0) return;
    uint64_t first = oplog_first_seq(m->log);
    if (first == 0 || first > older + 1) return; /* the log does not cover from it (or cannot tell) */
    if (snap_file_path(m->snap_dir, newest, bad, sizeof(bad)) != SMP_OK ||
        snap_file_path(m->snap_dir, older, good, sizeof(good)) != SMP_OK)
        return;
    size_t used = strlen(err);
    snprintf(err + used, errlen - used,
             "; hint: the older snapshot %s (seq %llu) is there and the OpLog holds every record "
             "after it (from seq %llu): moving %s aside (keep it) lets the master start from the "
             "older snapshot plus the log; it does not fall back by itself",
             good, (unsigned long long)older, (unsigned long long)first, bad);
}

/* The recovery proper; master_recover marks it running around this. */
static int recover(master *m, char *err, size_t errlen)
{
    snap_image *img = NULL;
    struct master_objs_load ol = {0};
    objs_early oe = {m, &ol};
    snap_early early = {
        .name = MASTER_SECTION_OBJECTS, .fn = objs_early_fn, .arg = &oe, .stream = 1};
    int rc = snap_load_newest_early(m->snap_dir, &early, &img, err, errlen);
    if (rc == SMP_ENOTFOUND) {
        img = NULL;
    } else if (rc < 0) {
        snap_early_fini(&early); /* the load was joined (objs_early_fn) */
        if (rc == SMP_EPROTO) hint_older_snapshot(m, err, errlen);
        return rc;
    }
    uint64_t last_seq = img ? snap_image_last_seq(img) : 0;
    rc = load_sections(m, img, &ol, err, errlen);
    snap_early_fini(&early); /* load_sections joined the load */
    snap_image_free(img);
    if (rc < 0) return rc;
    m->snapshot_seq = last_seq;
    m->applied_seq = last_seq;

    /* replay_one names a refused record in its own buffer: the backend
     * writes its generic "replay stopped" line into err when fn fails. */
    char cause[1024] = "";
    replay_ctx c = {m, cause, sizeof(cause)};
    err[0] = '\0';
    obj_store_bulk_begin(master_objs(m));
    rc = oplog_replay(m->log, last_seq, replay_one, &c, err, errlen);
    (void)obj_store_bulk_end(master_objs(m)); /* the LRU is sorted when first needed */
    if (rc < 0 && cause[0] != '\0') snprintf(err, errlen, "%s", cause);
    if (rc < 0 && err[0] == '\0') snprintf(err, errlen, "oplog: replay failed: %s", smp_strerror(rc));
    return rc;
}

int master_recover(master *m, char *err, size_t errlen)
{
    m->recovering = 1;
    int rc = recover(m, err, errlen);
    m->recovering = 0;
    return rc;
}
