/* master_fsck_schedule.c -- when the background fsck runs, where it goes
 * on after a stop, and when the nodes it could not check are checked.
 *
 * A cold copy that rots on disk is found by nothing until it is read: by a
 * load after its memory copy went, when it is too late to copy it again.
 * So every fsck.every_s (0: never) after the last one began, the leader
 * starts a background fsck: the deep check of every node's cold files at
 * fsck.bytes_per_s each, which drops the replicas it finds corrupt: the
 * plugin that owns one hears of the loss now, and a revision that needed
 * that copy is repaired from another replica or turns DEGRADED while a
 * copy may still exist (master_fsck.c runs it).
 *
 * A run owes a check to the nodes that were down at its start and to those
 * whose check ended in an error (one went down mid-run), each from the
 * last file it read. Those are not left for the next run, a week later: a
 * run over them alone starts as soon as one of them is up after it was
 * seen down, and one whose check failed while it stayed up is tried again
 * after FSCK_RETRY_MS, doubling to FSCK_RETRY_MAX_MS. A run that falls due
 * meanwhile checks every node and forgets what was owed.
 *
 * fsck.last -- in data_dir, or with HA in ha.snapshot_dir, which every
 * master shares -- keeps when the last run began (milliseconds since
 * the epoch) and the nodes owed, a line "at NODE AFTER" each (the last cold
 * file read; empty: from the first) -- written through a synced temporary
 * file and renamed, at a start, at most every FSCK_PROGRESS_MS while a run
 * pages, at a stop and at the end. So restarts -- more frequent than a week
 * in a rolling upgrade, shorter than the days a large tier takes -- neither
 * postpone the check nor repeat it: a master that finds nodes owed goes on
 * with them (once the nodes registered), one that finds none counts
 * fsck.every_s from the time in the file, and one that finds no file
 * writes the time it first looked and counts from there. The file is
 * advice, not state: one that cannot be read or written is logged and the
 * schedule goes on in memory; a line that does not parse is ignored (that
 * node is checked at the next run); a standby that takes over reads the
 * same file, so it neither repeats nor skips the last leader's run and goes
 * on with the nodes it owed. A temporary a master left when it died while
 * writing (fsck.last.PID.tmp, older than FSCK_TMP_STALE_S: a write takes
 * milliseconds) is removed at the next start. A run starts only once the nodes that hold segments
 * registered after the start (master_nodes_settled), never while another
 * runs. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "master_internal.h"

#define FSCK_LAST_FILE "fsck.last"
#define FSCK_RETRY_MS 60000        /* a run that could not start, or a failed node, tried again */
#define FSCK_RETRY_MAX_MS 3600000  /* a node that keeps failing: at least this often */
#define FSCK_PROGRESS_MS 30000     /* a running check's place is written at most this often */
#define FSCK_CURSOR_MAX 512        /* the longest node id or file name a cursor line keeps */
#define FSCK_TMP_STALE_S 600       /* a temporary of fsck.last this old was abandoned */

typedef struct master_fsck_schedule {
    int loaded;              /* fsck.last was read */
    uint64_t began_ms;       /* when the last run began (wall clock) */
    /* The nodes the last run (or one cut by a stop) owes, strings owned;
     * failed: its check failed while it stayed up, so it waits for
     * retry_at_ms (cleared once it is seen down: it is checked when up). */
    master_fsck_cursor *owed;
    size_t n_owed;
    uint64_t retry_at_ms;    /* wall */
    uint64_t retry_ms;       /* the last wait after a failed check (doubles) */
    uint64_t progress_ms;    /* when the place was last written (master_now_ms) */
    uint64_t runs, corrupt;  /* ended since the start, and what they found (metrics) */
} master_fsck_schedule;

static master_fsck_schedule *schedule_of(master *m)
{
    if (m->fsck_schedule == NULL) m->fsck_schedule = calloc(1, sizeof(*m->fsck_schedule));
    return m->fsck_schedule;
}

static void drop_owed(master_fsck_schedule *s)
{
    master_fsck_owed_free(s->owed, s->n_owed);
    s->owed = NULL;
    s->n_owed = 0;
}

/* fsck.last into path[cap]: in ha.snapshot_dir with HA (every master
 * reads it, so a new leader goes on where the last one was), else in
 * data_dir. */
static void last_path(const master *m, char *path, size_t cap)
{
    const char *dir = m->cfg->ha_enabled && m->cfg->ha_snapshot_dir != NULL &&
                              m->cfg->ha_snapshot_dir[0] != '\0'
                          ? m->cfg->ha_snapshot_dir
                          : m->cfg->data_dir;
    snprintf(path, cap, "%s/%s", dir, FSCK_LAST_FILE);
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

/* Write fsck.last: began, then an "at" line per node owed in c[n] (one
 * that could not be read back is left out: that node waits for the next
 * run). A failure is logged. */
static void save(const master *m, uint64_t began, const master_fsck_cursor *c, size_t n)
{
    char path[4200], tmp[4300];
    last_path(m, path, sizeof(path));
    /* this master's own temporary: a deposed leader that has not noticed
     * yet may write beside the new one (the last rename wins whole) */
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL && fprintf(f, "%" PRIu64 "\n", began) > 0;
    for (size_t i = 0; ok && i < n; i++) {
        if (cursor_word_ok(c[i].node, 0) && cursor_word_ok(c[i].after, 1))
            ok = fprintf(f, "at %s %s\n", c[i].node, c[i].after) > 0;
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f != NULL && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) == 0) return;
    fprintf(stderr, "store_master: background fsck: cannot write %s (%s): a restart counts "
            "fsck.every_s from its own start\n", path, strerror(errno));
    (void)unlink(tmp);
}

/* Take one "at NODE AFTER" line (its newline cut) into s->owed; a "done
 * NODE" line, which a master before the owed nodes wrote, owes nothing.
 * 0, or -1 for a line that does not parse (skipped; out of memory counts
 * as one). */
static int take_cursor(master_fsck_schedule *s, char *line)
{
    if (strncmp(line, "done ", 5) == 0) return cursor_word_ok(line + 5, 0) ? 0 : -1;
    if (strncmp(line, "at ", 3) != 0) return -1;
    char *node = line + 3, *sp = strchr(node, ' ');
    if (sp == NULL) return -1;
    *sp = '\0';
    if (!cursor_word_ok(node, 0) || !cursor_word_ok(sp + 1, 1)) return -1;
    /* a run cut by a stop goes on at once */
    return master_fsck_owe(&s->owed, &s->n_owed, node, sp + 1, 0) < 0 ? -1 : 0;
}

/* Remove the temporaries of fsck.last (path) that masters which died while
 * writing left in its directory: fsck.last.PID.tmp files older than
 * FSCK_TMP_STALE_S (a live writer renames its own within milliseconds, and
 * with HA the directory is shared, so the PID alone says nothing). Each
 * removal is logged; a failure leaves the file. */
static void remove_abandoned_temporaries(const char *path)
{
    char dir[4200], file[4400];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL) return;
    *slash = '\0';
    DIR *d = opendir(dir);
    if (d == NULL) return;
    time_t now = time(NULL);
    const char *prefix = FSCK_LAST_FILE ".";
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *name = e->d_name, *digits = name + strlen(prefix);
        size_t n = strlen(name), nd = strspn(digits, "0123456789");
        struct stat st;
        if (strncmp(name, prefix, strlen(prefix)) != 0 || nd == 0 || strcmp(digits + nd, ".tmp") != 0)
            continue;
        snprintf(file, sizeof(file), "%s/%.*s", dir, (int)n, name);
        if (lstat(file, &st) != 0 || !S_ISREG(st.st_mode) || now - st.st_mtime < FSCK_TMP_STALE_S)
            continue;
        if (unlink(file) == 0)
            fprintf(stderr, "store_master: background fsck: removed %s, left by a master that "
                    "stopped while writing it\n", file);
    }
    closedir(d);
}

/* Read fsck.last into s: when the last run began and the nodes it owes.
 * No file (or none that reads): count from now, and write it. */
static void load(master *m, master_fsck_schedule *s, uint64_t now)
{
    char path[4200], *line = NULL, *end = NULL;
    size_t cap = 0, ignored = 0;
    ssize_t got;
    last_path(m, path, sizeof(path));
    s->loaded = 1;
    remove_abandoned_temporaries(path);
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
        fprintf(stderr, "store_master: background fsck: %s: %zu line(s) that are not \"at NODE "
                "FILE\" ignored (those nodes wait for the next run)\n", path, ignored);
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

/* The run ended: keep the nodes it owes (and write them), and when those
 * that stayed up are tried again. */
static void on_done(master *m, const master_fsck_summary *sum)
{
    master_fsck_schedule *s = m->fsck_schedule;
    size_t failed = 0;
    if (s != NULL) {
        s->runs++;
        s->corrupt += sum->corrupt;
        drop_owed(s);
        for (size_t i = 0; i < sum->n_owed; i++) {
            const master_fsck_cursor *c = &sum->owed[i];
            failed += c->failed != 0;
            if (master_fsck_owe(&s->owed, &s->n_owed, c->node, c->after, c->failed) < 0) break;
        }
        s->retry_ms = failed == 0            ? 0
                      : s->retry_ms == 0     ? FSCK_RETRY_MS
                      : 2 * s->retry_ms > FSCK_RETRY_MAX_MS ? FSCK_RETRY_MAX_MS
                                                            : 2 * s->retry_ms;
        s->retry_at_ms = master_wall_ms() + s->retry_ms;
        save(m, s->began_ms, sum->owed, sum->n_owed);
    }
    char owed[160] = "";
    if (sum->n_owed > 0)
        snprintf(owed, sizeof(owed), "; %zu node(s) still owed their check, from where it stopped: "
                 "each as soon as it is up%s", sum->n_owed,
                 failed > 0 ? " (one that failed while up, after a wait)" : "");
    fprintf(stderr, "store_master: background fsck: ended: %zu nodes checked (%zu ended in an "
            "error, %u not up), %" PRIu64 " cold files, %" PRIu64 " bytes: %" PRIu64 " corrupt, "
            "%" PRIu64 " of their replicas dropped, %" PRIu64 " files no replica names; %" PRIu64
            " objects have no replica left%s%s\n", sum->nodes, sum->nodes_failed, sum->nodes_down,
            sum->cold_files, sum->cold_bytes, sum->corrupt, sum->dropped, sum->orphans,
            sum->objects_without_replica,
            sum->objects_without_replica > 0 ? " (`weightctl fsck` names them)" : "", owed);
}

/* 1 when a node owed a check may be checked now: up, and either seen down
 * since (it came back) or past the wait after a failed check. Notes the
 * owed nodes that are down. */
static int owed_ready(master *m, master_fsck_schedule *s, uint64_t wall)
{
    int ready = 0;
    for (size_t i = 0; i < s->n_owed; i++) {
        master_fsck_cursor *o = &s->owed[i];
        if (!master_node_readable(m, o->node)) o->failed = 0; /* checked once it is back */
        else if (!o->failed || wall >= s->retry_at_ms) ready = 1;
    }
    return ready;
}

/* "NODE after FILE, NODE from the first, ..." of the nodes owed, into
 * buf[cap] (cut with "..." when it does not fit). */
static void owed_names(const master_fsck_schedule *s, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < s->n_owed && at < cap; i++) {
        const master_fsck_cursor *o = &s->owed[i];
        int w = snprintf(buf + at, cap - at, "%s%s %s%s", i ? ", " : "", o->node,
                         o->after[0] ? "after " : "from the first file", o->after);
        if (w < 0 || (size_t)w >= cap - at) {
            snprintf(buf + (at < cap - 4 ? at : cap - 4), 4, "...");
            return;
        }
        at += (size_t)w;
    }
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
    int due = wall - s->began_ms >= every_ms;
    if (!due && !owed_ready(m, s, wall)) return;
    char names[600] = "";
    if (due) {
        drop_owed(s); /* every node is checked */
        s->began_ms = wall;
        save(m, wall, NULL, 0);
        fprintf(stderr, "store_master: background fsck: started: the cold files of every node "
                "that is up, at %" PRIu64 " bytes/s each (fsck.every_s %u)\n",
                m->cfg->fsck_bytes_per_s, m->cfg->fsck_every_s);
    } else {
        owed_names(s, names, sizeof(names));
        fprintf(stderr, "store_master: background fsck: resumed: the %zu node(s) the last run "
                "still owes (those not up wait), at %" PRIu64 " bytes/s each: %s\n", s->n_owed,
                m->cfg->fsck_bytes_per_s, names);
    }
    /* The run's end replaces the nodes owed: the start borrows them, taken
     * out of s (a run with nothing to wait for ends within the call). */
    master_fsck_cursor *owed = s->owed;
    size_t n_owed = s->n_owed;
    s->owed = NULL;
    s->n_owed = 0;
    s->progress_ms = 0;
    int rc = master_fsck_background_start(m, m->cfg->fsck_bytes_per_s, due ? NULL : owed, n_owed,
                                          on_progress, on_done);
    if (rc < 0 && s->owed == NULL) { /* not started: still owed */
        s->owed = owed;
        s->n_owed = n_owed;
        owed = NULL;
        n_owed = 0;
    }
    master_fsck_owed_free(owed, n_owed);
    if (rc < 0) {
        fprintf(stderr, "store_master: background fsck: cannot start: %s; tried again in %d s\n",
                smp_strerror(rc), FSCK_RETRY_MS / 1000);
        if (due) s->began_ms = wall - every_ms + FSCK_RETRY_MS;
        s->retry_at_ms = wall + FSCK_RETRY_MS;
        for (size_t i = 0; i < s->n_owed; i++) s->owed[i].failed = 1; /* wait, even if up */
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
    drop_owed(m->fsck_schedule);
    free(m->fsck_schedule);
    m->fsck_schedule = NULL;
}
