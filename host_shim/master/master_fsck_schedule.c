/* master_fsck_schedule.c -- when the background fsck runs.
 *
 * A cold copy that rots on disk is found by nothing until it is read: by a
 * load after its memory copy went, when it is too late to copy it again.
 * So every fsck.every_s (0: never) after the last one began, the leader
 * starts a background fsck: the deep check of every up node's cold files at
 * fsck.bytes_per_s each, which drops the replicas it finds corrupt so that
 * their plugins copy them again (master_fsck.c runs it).
 *
 * When the last one began is kept in <data_dir>/fsck.last (milliseconds
 * since the epoch, as text), so that restarts -- more frequent than a week
 * in a rolling upgrade -- neither postpone it for ever nor start one at
 * every start: a master that finds no such file writes the time it first
 * looked and counts from there. The file is advice, not state: one that
 * cannot be read or written is logged and rewritten, and a standby that
 * takes over counts from its own. A run cut short by a stop is not resumed:
 * the next begins fsck.every_s after it began (what it found was already
 * acted upon as it went). A run starts only once the nodes that hold
 * segments registered after the start (master_nodes_settled), never while
 * another runs. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "master_internal.h"

#define FSCK_LAST_FILE "fsck.last"
#define FSCK_RETRY_MS 60000 /* a run that could not start is tried again this much later */

/* <data_dir>/fsck.last into path[cap]. */
static void last_path(const master *m, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", m->cfg->data_dir, FSCK_LAST_FILE);
}

/* Write when (wall ms) to fsck.last through a temporary file, synced and
 * renamed over it; a failure is logged (the schedule goes on in memory). */
static void save_last(const master *m, uint64_t when)
{
    char path[4200], tmp[4300];
    last_path(m, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL && fprintf(f, "%" PRIu64 "\n", when) > 0 && fflush(f) == 0 &&
             fsync(fileno(f)) == 0;
    if (f != NULL && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) == 0) return;
    fprintf(stderr, "store_master: background fsck: cannot write %s (%s): a restart counts "
            "fsck.every_s from its own start\n", path, strerror(errno));
    (void)unlink(tmp);
}

/* When the last background fsck began, from fsck.last; a master that finds
 * none (or none it can read) starts counting at now and writes it. */
static uint64_t load_last(const master *m, uint64_t now)
{
    char path[4200], line[64] = "", *end = NULL;
    last_path(m, path, sizeof(path));
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(line, sizeof(line), f) == NULL) line[0] = '\0';
        fclose(f);
        errno = 0;
        unsigned long long v = strtoull(line, &end, 10);
        if (errno == 0 && end != line && (*end == '\n' || *end == '\0') && v > 0 && v <= now)
            return (uint64_t)v;
        fprintf(stderr, "store_master: background fsck: %s does not hold a time before now; "
                "counting fsck.every_s from now\n", path);
    } else if (errno != ENOENT) {
        fprintf(stderr, "store_master: background fsck: cannot read %s (%s); counting "
                "fsck.every_s from now\n", path, strerror(errno));
    }
    save_last(m, now);
    return now;
}

static void on_done(master *m, const master_fsck_summary *s)
{
    m->fsck_background_runs++;
    m->fsck_background_corrupt += s->corrupt;
    fprintf(stderr, "store_master: background fsck: ended: %zu nodes checked (%zu ended in an "
            "error, %u not up), %" PRIu64 " cold files, %" PRIu64 " bytes: %" PRIu64 " corrupt, "
            "%" PRIu64 " of their replicas dropped, %" PRIu64 " files no replica names; %" PRIu64
            " objects have no replica left%s\n", s->nodes, s->nodes_failed, s->nodes_down,
            s->cold_files, s->cold_bytes, s->corrupt, s->dropped, s->orphans,
            s->objects_without_replica,
            s->objects_without_replica > 0 ? " (`weightctl fsck` names them)" : "");
}

void master_fsck_schedule_tick(master *m, uint64_t now)
{
    master_fsck_background_tick(m, now);
    uint64_t every_ms = (uint64_t)m->cfg->fsck_every_s * 1000u;
    if (every_ms == 0 || m->fsck_background != NULL || !m->nodes_settled) return;
    uint64_t wall = master_wall_ms();
    if (m->fsck_last_wall_ms == 0) m->fsck_last_wall_ms = load_last(m, wall);
    if (wall < m->fsck_last_wall_ms) m->fsck_last_wall_ms = wall; /* the clock went back */
    if (wall - m->fsck_last_wall_ms < every_ms) return;
    m->fsck_last_wall_ms = wall;
    save_last(m, wall);
    fprintf(stderr, "store_master: background fsck: started: the cold files of every node that "
            "is up, at %" PRIu64 " bytes/s each (fsck.every_s %u)\n", m->cfg->fsck_bytes_per_s,
            m->cfg->fsck_every_s);
    int rc = master_fsck_background_start(m, m->cfg->fsck_bytes_per_s, on_done);
    if (rc < 0) {
        fprintf(stderr, "store_master: background fsck: cannot start: %s; tried again in %d s\n",
                smp_strerror(rc), FSCK_RETRY_MS / 1000);
        m->fsck_last_wall_ms = wall - every_ms + FSCK_RETRY_MS;
    }
}
