/* master_fsck_schedule.c -- when the background fsck runs, and where it
 * goes on after a stop.
 *
 * A cold copy that rots on disk is found by nothing until it is read: by a
 * load after its memory copy went, when it is too late to copy it again.
 * So every fsck.every_s (0: never) after the last one began, the leader
 * starts a background fsck: the deep check of every up node's cold files at
 * fsck.bytes_per_s each, which drops the replicas it finds corrupt: the
 * plugin that owns one hears of the loss now, and a revision that needed
 * that copy is repaired from another replica or turns DEGRADED while a
 * copy may still exist (master_fsck.c runs it).
 *
 * <data_dir>/fsck.last keeps when the last one began (milliseconds since
 * the epoch) and, while it runs, where each node's check is -- a line "at
 * NODE AFTER" (the last cold file it read) or "done NODE" -- written
 * through a synced temporary file and renamed, at most every
 * FSCK_PROGRESS_MS and at a stop. So restarts -- more
 * frequent than a week in a rolling upgrade, shorter than the days a large
 * tier takes -- neither postpone the check nor repeat it: a master that
 * finds a run in the file resumes it where it was (once the nodes
 * registered), one that finds none counts fsck.every_s from its start, and
 * one that finds no file writes the time it first looked and counts from
 * there. The file is advice, not state: one that cannot be read or written
 * is logged and the schedule goes on in memory; a line that does not parse
 * is ignored (that node starts over); a standby that takes over counts from
 * its own file. A run starts only once the nodes that hold segments
 * registered after the start (master_nodes_settled), never while another
 * runs. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "master_internal.h"

#define FSCK_LAST_FILE "fsck.last"
#define FSCK_RETRY_MS 60000    /* a run that could not start is tried again this much later */
#define FSCK_PROGRESS_MS 30000 /* a running check's place is written at most this often */
#define FSCK_CURSOR_MAX 512    /* the longest node id or file name a cursor line keeps */

typedef struct master_fsck_schedule {
    int loaded;              /* fsck.last was read */
    uint64_t began_ms;       /* when the last run began (wall clock) */
    master_fsck_cursor *resume; /* a run cut by a stop: where its nodes were (owned strings) */
    size_t n_resume;
    uint64_t progress_ms;    /* when the place was last written (master_now_ms) */
    uint64_t runs, corrupt;  /* ended since the start, and what they found (metrics) */
} master_fsck_schedule;

static master_fsck_schedule *schedule_of(master *m)
{
    if (m->fsck_schedule == NULL) m->fsck_schedule = calloc(1, sizeof(*m->fsck_schedule));
    return m->fsck_schedule;
}

static void drop_resume(master_fsck_schedule *s)
{
    for (size_t i = 0; i < s->n_resume; i++) {
        free((char *)s->resume[i].node);
        free((char *)s->resume[i].after);
    }
    free(s->resume);
    s->resume = NULL;
    s->n_resume = 0;
}

/* <data_dir>/fsck.last into path[cap]. */
static void last_path(const master *m, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", m->cfg->data_dir, FSCK_LAST_FILE);
}

/* 1 when s can stand in a cursor line: 1..FSCK_CURSOR_MAX bytes, no space
 * nor control character. */
static int cursor_word_ok(const char *s, int may_be_empty)
{
    size_t n = strlen(s);
    if ((n == 0 && !may_be_empty) || n > FSCK_CURSOR_MAX) return 0;
    for (; *s != '\0'; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f) return 0;
    return 1;
}

/* Write fsck.last: began, then a line per cursor of c[n] (one that could
 * not be read back is left out: that node starts over). A failure is
 * logged. */
static void save(const master *m, uint64_t began, const master_fsck_cursor *c, size_t n)
{
    char path[4200], tmp[4300];
    last_path(m, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL && fprintf(f, "%" PRIu64 "\n", began) > 0;
    for (size_t i = 0; ok && i < n; i++) {
        if (!cursor_word_ok(c[i].node, 0)) continue;
        if (c[i].done) ok = fprintf(f, "done %s\n", c[i].node) > 0;
        else if (cursor_word_ok(c[i].after, 1))
            ok = fprintf(f, "at %s %s\n", c[i].node, c[i].after) > 0;
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f != NULL && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) == 0) return;
    fprintf(stderr, "store_master: background fsck: cannot write %s (%s): a restart counts "
            "fsck.every_s from its own start\n", path, strerror(errno));
    (void)unlink(tmp);
}

/* Take one "at NODE AFTER" or "done NODE" line (its newline cut) into
 * s->resume. 0, or -1 for a line that does not parse (skipped; out of
 * memory counts as one). */
static int take_cursor(master_fsck_schedule *s, char *line)
{
    int done = strncmp(line, "done ", 5) == 0;
    if (!done && strncmp(line, "at ", 3) != 0) return -1;
    char *node = line + (done ? 5 : 3), *sp = strchr(node, ' ');
    if (done != (sp == NULL)) return -1;
    if (sp != NULL) *sp = '\0';
    const char *after = sp != NULL ? sp + 1 : "";
    if (!cursor_word_ok(node, 0) || !cursor_word_ok(after, 1)) return -1;
    master_fsck_cursor *v = realloc(s->resume, (s->n_resume + 1) * sizeof(*v));
    if (v == NULL) return -1;
    s->resume = v;
    char *n = strdup(node), *a = strdup(after);
    if (n == NULL || a == NULL) {
        free(n);
        free(a);
        return -1;
    }
    v[s->n_resume++] = (master_fsck_cursor){n, a, done};
    return 0;
}

/* Read fsck.last into s: when the last run began and, if it was cut by a
 * stop, where its nodes were. No file (or none that reads): count from
 * now, and write it. */
static void load(master *m, master_fsck_schedule *s, uint64_t now)
{
    char path[4200], *line = NULL, *end = NULL;
    size_t cap = 0, ignored = 0;
    ssize_t got;
    last_path(m, path, sizeof(path));
    s->loaded = 1;
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        if (errno != ENOENT)
            fprintf(stderr, "store_master: background fsck: cannot read %s (%s); counting "
                    "fsck.every_s from now\n", path, strerror(errno));
        s->began_ms = now;
        save(m, now, NULL, 0);
        return;
    }
    int first = 1;
    while ((got = getline(&line, &cap, f)) > 0) { /* whole lines, however long */
        line[strcspn(line, "\n")] = '\0';
        if (first) {
            errno = 0;
            unsigned long long v = strtoull(line, &end, 10);
            if (errno != 0 || end == line || *end != '\0' || v == 0 || v > now) break;
            s->began_ms = (uint64_t)v;
            first = 0;
            continue;
        }
        ignored += take_cursor(s, line) < 0;
    }
    free(line);
    fclose(f);
    if (ignored > 0)
        fprintf(stderr, "store_master: background fsck: %s: %zu line(s) that are neither \"at "
                "NODE FILE\" nor \"done NODE\" ignored (those nodes start over)\n", path, ignored);
    if (first) {
        fprintf(stderr, "store_master: background fsck: %s does not begin with a time before "
                "now; counting fsck.every_s from now\n", path);
        s->began_ms = now;
        save(m, now, NULL, 0);
    }
}

static void on_progress(master *m, const master_fsck_cursor *c, size_t n)
{
    master_fsck_schedule *s = m->fsck_schedule;
    uint64_t now = master_now_ms();
    if (s == NULL ||
        (!m->stopping && s->progress_ms != 0 && now - s->progress_ms < FSCK_PROGRESS_MS))
        return;
    s->progress_ms = now;
    save(m, s->began_ms, c, n);
}

static void on_done(master *m, const master_fsck_summary *sum)
{
    master_fsck_schedule *s = m->fsck_schedule;
    if (s != NULL) {
        s->runs++;
        s->corrupt += sum->corrupt;
        save(m, s->began_ms, NULL, 0); /* over: nothing to resume */
    }
    fprintf(stderr, "store_master: background fsck: ended: %zu nodes checked (%zu ended in an "
            "error, %u not up), %" PRIu64 " cold files, %" PRIu64 " bytes: %" PRIu64 " corrupt, "
            "%" PRIu64 " of their replicas dropped, %" PRIu64 " files no replica names; %" PRIu64
            " objects have no replica left%s\n", sum->nodes, sum->nodes_failed, sum->nodes_down,
            sum->cold_files, sum->cold_bytes, sum->corrupt, sum->dropped, sum->orphans,
            sum->objects_without_replica,
            sum->objects_without_replica > 0 ? " (`weightctl fsck` names them)" : "");
}

void master_fsck_schedule_tick(master *m, uint64_t now)
{
    master_fsck_background_tick(m, now);
    uint64_t every_ms = (uint64_t)m->cfg->fsck_every_s * 1000u;
    if (every_ms == 0 || m->fsck_background != NULL || !m->nodes_settled) return;
    master_fsck_schedule *s = schedule_of(m);
    if (s == NULL) return;
    uint64_t wall = master_wall_ms();
    if (!s->loaded) load(m, s, wall);
    if (wall < s->began_ms) s->began_ms = wall; /* the clock went back */
    int resume = s->n_resume > 0;
    if (!resume && wall - s->began_ms < every_ms) return;
    if (!resume) {
        s->began_ms = wall;
        save(m, wall, NULL, 0);
    }
    s->progress_ms = 0;
    fprintf(stderr, "store_master: background fsck: %s: the cold files of every node that is "
            "up, at %" PRIu64 " bytes/s each (fsck.every_s %u)%s\n", resume ? "resumed" : "started",
            m->cfg->fsck_bytes_per_s, m->cfg->fsck_every_s,
            resume ? ", each node after the file its check reached before the stop" : "");
    int rc = master_fsck_background_start(m, m->cfg->fsck_bytes_per_s, s->resume, s->n_resume,
                                          on_progress, on_done);
    drop_resume(s); /* read at the start only */
    if (rc < 0) {
        fprintf(stderr, "store_master: background fsck: cannot start: %s; tried again in %d s\n",
                smp_strerror(rc), FSCK_RETRY_MS / 1000);
        s->began_ms = wall - every_ms + FSCK_RETRY_MS;
    }
}

uint64_t master_fsck_schedule_runs(const master *m)
{
    return m->fsck_schedule != NULL ? m->fsck_schedule->runs : 0;
}

uint64_t master_fsck_schedule_corrupt(const master *m)
{
    return m->fsck_schedule != NULL ? m->fsck_schedule->corrupt : 0;
}

void master_fsck_schedule_free(master *m)
{
    if (m->fsck_schedule == NULL) return;
    drop_resume(m->fsck_schedule);
    free(m->fsck_schedule);
    m->fsck_schedule = NULL;
}
